<?php
// Asks the server to send a file from the internal location instead of its own body.
header('Content-Disposition: attachment; filename="report.txt"');
if (($_GET['how'] ?? '') === 'sendfile') {
    header('X-Sendfile: ' . $_GET['path']);
} else {
    header('X-Accel-Redirect: /protected/' . ($_GET['name'] ?? 'report.txt'));
}
echo "this body is not sent\n";
