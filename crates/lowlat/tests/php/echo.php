<?php
// The request body read as it streams in: its length and SHA-256, and the form fields PHP parsed.
header('Content-Type: application/json');
$in = fopen('php://input', 'rb');
$ctx = hash_init('sha256');
$n = 0;
while (!feof($in)) {
    $chunk = fread($in, 1 << 16);
    if ($chunk === false || $chunk === '') {
        break;
    }
    $n += strlen($chunk);
    hash_update($ctx, $chunk);
}
echo json_encode([
    'length' => $n,
    'sha256' => hash_final($ctx),
    'content_length' => $_SERVER['CONTENT_LENGTH'] ?? null,
    'content_type' => $_SERVER['CONTENT_TYPE'] ?? null,
    'post' => $_POST,
]);
