<?php
/*
 * shrink: the work of one synthetic dynamic page (included by every app/<page>.php).
 *
 * GET /app/<page>.php?bytes=B&work=W&mem=M&id=I
 *   1. allocates a working set of M KiB (a string, written once: that write
 *      touches every cache line of it),
 *   2. does W work units: each unit is SHRINK_STEPS_PER_UNIT steps of a
 *      data-dependent random walk over the working set (the next position
 *      depends on the byte just read, so the steps form one dependent chain
 *      of loads: with a working set larger than the caches each step waits
 *      for main memory, which is what makes these requests memory-intensive,
 *      as Hashemian et al. found dynamic requests 3.6x more so than static ones),
 *   3. prints exactly B bytes of body (Content-Length: B).
 *
 * Calibration of "1 work unit ~ 1 microsecond": on the project's 2-core KVM
 * VM (Intel Xeon, 2026-11-21, PHP 8.2 php-cgi, opcache as Debian ships it),
 * with a cache-resident 64 KiB working set, 100,000 units of 30 steps took
 * 67.1-67.4 ms (best of 5 runs, four repeats, machine nearly idle): 0.0224 us
 * a step, so 45 steps make one unit; measured again with 45 steps a unit took
 * 1.02-1.13 us (five repeats; other jobs shared the machine). Re-measure with
 * `python bench/bench_synth.py`, which prints the microseconds a unit takes
 * on the machine it runs on. With M above the caches a unit takes longer:
 * 1.6x at 4 MiB and 6.5x at 32 MiB here (L2 4 MiB). That excess is the
 * memory cost the workload means to show, not a calibration error.
 * Building the working set costs apart from the units: 7 us at 64 KiB, 31 us
 * at 1 MiB, 1.6 ms at 4 MiB, 16.6 ms at 32 MiB (above PHP's 2 MiB chunk the
 * string is mapped fresh from the kernel on every request: page faults).
 *
 * Bad or missing parameters fall back to defaults; all are capped so a typo
 * cannot take the server down.
 */

declare(strict_types=1);

const SHRINK_STEPS_PER_UNIT = 45;
const SHRINK_MAX_BYTES = 104857600;  // 100 MiB of body
const SHRINK_MAX_WORK = 10000000;    // about 10 s of CPU
const SHRINK_MAX_MEM_KIB = 65536;    // 64 MiB, under php.ini's default memory_limit of 128M

function shrink_int_param(string $name, int $default, int $max): int
{
    $v = $_GET[$name] ?? null;
    if (!is_string($v) || preg_match('/^[0-9]{1,18}$/', $v) !== 1) {
        return $default;
    }
    return min((int) $v, $max);
}

/** W work units of random walk over a fresh working set of M KiB; returns a checksum. */
function shrink_walk(int $units, int $mem_kib): int
{
    $block = '';
    for ($k = 0; $k < 256; $k++) {
        $block .= chr(($k * 167 + 13) & 255);
    }
    $buf = str_repeat($block, max(1, $mem_kib) * 4);
    $len = strlen($buf);
    $i = 1;
    $acc = 0;
    $steps = $units * SHRINK_STEPS_PER_UNIT;
    for ($s = 0; $s < $steps; $s++) {
        // ($i ^ byte) < 2^31 and the multiplier < 2^32: the product stays a 64-bit int.
        $i = (($i ^ ord($buf[$i % $len])) * 2654435761 + $s) & 0x7fffffff;
        $acc += $i & 1;
    }
    return $acc ^ ord($buf[$i % $len]);
}

/** The whole request: parameters, work, exactly `bytes` bytes of body. */
function shrink_page(string $page): void
{
    $bytes = shrink_int_param('bytes', 10240, SHRINK_MAX_BYTES);
    $work = shrink_int_param('work', 0, SHRINK_MAX_WORK);
    $mem = shrink_int_param('mem', 64, SHRINK_MAX_MEM_KIB);
    $id = shrink_int_param('id', 0, PHP_INT_MAX);
    $acc = shrink_walk($work, $mem);
    header('Content-Type: text/html');
    header('Content-Length: ' . $bytes);
    $head = "<!-- shrink $page id=$id work=$work mem=$mem acc=$acc -->\n";
    if (strlen($head) >= $bytes) {
        echo substr($head, 0, $bytes);
        return;
    }
    echo $head, str_repeat('x', $bytes - strlen($head));
}
