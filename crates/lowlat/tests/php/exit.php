<?php
// A script that stops midway: exit() after some output, or a fatal error.
echo "before\n";
flush();
if (($_GET['how'] ?? '') === 'fatal') {
    no_such_function();
}
exit(3);
echo "after\n";
