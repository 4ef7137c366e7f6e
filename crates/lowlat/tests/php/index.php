<?php
// The front controller: what a WordPress-like application's index.php sees of a pretty URL.
header('Content-Type: application/json');
echo json_encode([
    'front' => true,
    'uri' => $_SERVER['REQUEST_URI'],
    'script_name' => $_SERVER['SCRIPT_NAME'],
    'path_info' => $_SERVER['PATH_INFO'] ?? null,
    'query' => $_SERVER['QUERY_STRING'],
    'get' => $_GET,
]);
