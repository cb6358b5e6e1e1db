#!/usr/bin/env python3
"""Per-package statement coverage from a -coverpkg profile, merging the
duplicate blocks that each test binary writes. Fails (exit 1) when a package
named on the command line is under the threshold."""
import collections
import re
import sys

profile, threshold, gated = sys.argv[1], float(sys.argv[2]), sys.argv[3:]
blocks = {}
for line in open(profile).read().splitlines()[1:]:
    m = re.match(r'(\S+) (\d+) (\d+)$', line)
    key, n, c = m.group(1), int(m.group(2)), int(m.group(3))
    old = blocks.get(key, (n, 0))
    blocks[key] = (n, max(old[1], c))
tot, cov = collections.Counter(), collections.Counter()
for key, (n, c) in blocks.items():
    pkg = key.rsplit('/', 1)[0]
    tot[pkg] += n
    if c:
        cov[pkg] += n
fail = False
for p in sorted(tot):
    pct = 100 * cov[p] / tot[p]
    short = p.replace('github.com/tamanic/tamanic/', '')
    mark = ''
    if any(short == g or short.startswith(g + '/') for g in gated):
        mark = ' (gate %.0f%%)' % threshold
        if pct < threshold:
            mark += ' FAIL'
            fail = True
    print('%-24s %5.1f%%%s' % (short, pct, mark))
sys.exit(1 if fail else 0)
