<?php
// Answers only after the given number of seconds.
sleep((int) ($_GET['s'] ?? 5));
echo "awake\n";
