<?php
// A fatal error before any output: PHP answers 500.
no_such_function();
