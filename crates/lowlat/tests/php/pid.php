<?php
// Which php-fpm process answered.
echo getmypid();
