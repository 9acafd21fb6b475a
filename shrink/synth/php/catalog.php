<?php
// shrink Support-like page "catalog": the work is in _work.php.
require __DIR__ . '/_work.php';
shrink_page('catalog');
