"""Memory access energy by size: Yang et al. Table 3 (pJ per 16-bit access), shared by every energy model."""

from __future__ import annotations

import math

from engine.errors import UnknownNameError

KB = 1024

# Yang et al. Table 3: size (KB) -> pJ per 16-bit access for memory widths 64, 128, 256, 512 bits.
TABLE3_WIDTHS = (64, 128, 256, 512)
TABLE3 = ((1, (1.20, 0.93, 0.69, 0.57)), (2, (1.54, 1.37, 0.91, 0.68)), (4, (2.11, 1.68, 1.34, 0.90)),
          (8, (3.19, 2.71, 2.21, 1.33)), (16, (4.36, 3.57, 2.66, 2.19)), (32, (5.82, 4.80, 3.52, 2.64)),
          (64, (8.10, 7.51, 5.79, 4.67)), (128, (11.66, 11.50, 8.46, 6.15)), (256, (15.60, 15.51, 13.09, 8.99)),
          (512, (23.37, 23.24, 17.93, 15.76)), (1024, (36.32, 32.81, 28.88, 25.22)))
TABLE3_DRAM_PJ = 320.0
MAC_PJ = 1.0  # Sec. 5.2 / Fig. 5: "the computation energy (about 1 pJ/MAC)"


def access_energy_pj(size_bytes: float, *, width_bits: int = 64, word_bits: int = 16) -> float:
    """Energy of one `word_bits` access to a memory of `size_bytes` (Table 3, interpolated in log size).

    Below 1 KB the 1 KB row is used (the table starts there); between 1 MB and 16 MB the last
    row's growth per doubling continues; beyond 16 MB the memory is DRAM.
    """
    if width_bits not in TABLE3_WIDTHS:
        raise UnknownNameError("Table 3 memory width (bits)", str(width_bits), [str(w) for w in TABLE3_WIDTHS])
    col = TABLE3_WIDTHS.index(width_bits)
    scale = word_bits / 16
    kb = size_bytes / KB
    if kb > 16 * 1024:
        return TABLE3_DRAM_PJ * scale
    rows = [(k, e[col]) for k, e in TABLE3]
    if kb <= rows[0][0]:
        return rows[0][1] * scale
    for (k0, e0), (k1, e1) in zip(rows, rows[1:]):
        if kb <= k1:
            f = math.log2(kb / k0) / math.log2(k1 / k0)
            return (e0 + f * (e1 - e0)) * scale
    (k0, e0), growth = rows[-1], rows[-1][1] / rows[-2][1]
    return e0 * growth ** math.log2(kb / k0) * scale
