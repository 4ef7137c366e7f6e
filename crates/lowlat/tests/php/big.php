<?php
// A download of the given size generated as it goes (no Content-Length: chunked to the
// client), a 251-byte pattern repeated.
header('Content-Type: application/octet-stream');
$size = (int) ($_GET['size'] ?? 0);
$unit = '';
for ($i = 0; $i < 251; $i++) {
    $unit .= chr($i);
}
$block = str_repeat($unit, 261); // 65511 bytes: a multiple of the pattern
$left = $size;
while ($left > 0) {
    $n = min($left, strlen($block));
    echo $n === strlen($block) ? $block : substr($block, 0, $n);
    $left -= $n;
}
