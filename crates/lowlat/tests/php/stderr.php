<?php
// Messages for the server's error log (FCGI_STDERR), and a body for the client.
error_log('stderr-marker ' . ($_GET['tag'] ?? ''));
echo "logged\n";
