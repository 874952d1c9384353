#!/usr/bin/env python3
"""One line per kernel launch of an `ncu --csv --metrics ...` report (the
metrics scripts/gpu/bench.sh asks for): time, DRAM bytes and share of peak,
active warps, launch shape, registers, IPC, stalls, bank conflicts.

  python3 scripts/gpu/ncu_summary.py ncu.csv
"""
import collections
import csv
import sys


def _mb(k, metric):
    scale = {'byte': 1, 'Kbyte': 1e3, 'Mbyte': 1e6, 'Gbyte': 1e9, 'KB': 1e3, 'MB': 1e6, 'GB': 1e9}
    return float(k.get(metric, 'nan')) * scale.get(k.get(metric + ':unit', 'byte'), 1) / 1e6


def main(path):
    rows = list(csv.reader(open(path)))
    header = next(i for i, r in enumerate(rows) if 'Kernel Name' in r)
    h = rows[header]
    name, metric, value, launch = (h.index(c) for c in ('Kernel Name', 'Metric Name', 'Metric Value', 'ID'))
    units = h.index('Metric Unit') if 'Metric Unit' in h else None
    kernels = collections.OrderedDict()
    for r in rows[header + 1:]:
        if len(r) <= value:
            continue
        k = kernels.setdefault(r[launch], {'name': r[name]})
        k[r[metric]] = r[value].replace(',', '')
        if units is not None:
            k[r[metric] + ':unit'] = r[units]
    total = 0.0
    # L2 traffic and the L1 hit rate, where the report has them.
    l2 = any('lts__t_bytes.sum' in k for k in kernels.values())
    print('%3s %-46s %9s %9s %6s %6s %7s %5s %5s %5s %6s %6s %8s' % (
        'id', 'kernel', 'time', 'DRAM', 'DRAM%', 'warps%', 'grid', 'block', 'regs', 'IPC', 'mem%', 'bar%', 'conflicts')
          + ('%9s %5s %5s' % ('L2', 'L2%', 'L1hit%') if l2 else ''))
    for i, k in kernels.items():
        t = float(k.get('gpu__time_duration.sum', 'nan'))
        unit = k.get('gpu__time_duration.sum:unit', '')
        us = t / 1000 if unit in ('ns', 'nsecond') else t if unit in ('us', 'usecond') else t
        total += us
        dram = float(k.get('dram__bytes_read.sum', 'nan'))
        dunit = k.get('dram__bytes_read.sum:unit', 'byte')
        scale = {'byte': 1, 'Kbyte': 1e3, 'Mbyte': 1e6, 'Gbyte': 1e9, 'KB': 1e3, 'MB': 1e6, 'GB': 1e9}.get(dunit, 1)
        n = k['name'].replace('kiln::', '').replace('Storage', '').replace('(MatmulParams)', '').replace('(AttentionParams)', '')
        print('%3s %-46s %7.1f us %7.2f MB %6s %6s %7s %5s %5s %5s %6s %6s %8s' % (
            i, n[:46], us, dram * scale / 1e6, k.get('dram__throughput.avg.pct_of_peak_sustained_elapsed', '-'),
            k.get('sm__warps_active.avg.pct_of_peak_sustained_active', '-'), k.get('launch__grid_size', '-'),
            k.get('launch__block_size', '-'), k.get('launch__registers_per_thread', '-'),
            k.get('sm__inst_executed.avg.per_cycle_active', '-'),
            k.get('smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct', '-'),
            k.get('smsp__warp_issue_stalled_barrier_per_warp_active.pct', '-'),
            k.get('l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum', '-'))
              + (' %6.2f MB %5s %5s' % (_mb(k, 'lts__t_bytes.sum'), k.get('lts__throughput.avg.pct_of_peak_sustained_elapsed', '-'),
                                       k.get('l1tex__t_sector_hit_rate.pct', '-')) if l2 else ''))
    print('total %.1f us over %d launches' % (total, len(kernels)))


if __name__ == '__main__':
    main(sys.argv[1])
