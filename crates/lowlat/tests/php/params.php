<?php
// The CGI/1.1 variables as the application sees them.
header('Content-Type: application/json');
echo json_encode(['server' => $_SERVER, 'get' => $_GET, 'post' => $_POST, 'cookie' => $_COOKIE]);
