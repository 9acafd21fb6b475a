<?php
// shrink Support-like page "product": the work is in _work.php.
require __DIR__ . '/_work.php';
shrink_page('product');
