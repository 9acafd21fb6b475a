<?php
// shrink Support-like page "index": the work is in _work.php.
require __DIR__ . '/_work.php';
shrink_page('index');
