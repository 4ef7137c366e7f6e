<?php
// Answers after the given number of milliseconds (100 by default), having read no input.
usleep((int) ($_GET['ms'] ?? 100) * 1000);
echo "rested\n";
