<?php
// Writes a line every 100 ms for 5 s; says in files beside it whether it was aborted (the
// client went away) or ran to the end.
$tag = preg_replace('/[^a-z0-9]/', '', $_GET['tag'] ?? 'x');
register_shutdown_function(function () use ($tag) {
    file_put_contents(__DIR__ . "/slow-$tag.end", connection_aborted() ? 'aborted' : 'completed');
});
for ($i = 0; $i < 50; $i++) {
    echo str_repeat('.', 1024), "\n";
    flush();
    usleep(100000);
}
file_put_contents(__DIR__ . "/slow-$tag.done", 'done');
