"""benchmarks/kernel_share.py's reading of ``perf script`` output (pure: no perf, no servers)."""

from __future__ import annotations

from benchmarks.kernel_share import samples, shares

SCRIPT = """\
swapper     0/0
\tffffffff821f6f8b pv_native_safe_halt ([kernel.kallsyms])

postgres 200/200
\tffffffff81b700cd copy_folio_from_iter_atomic ([kernel.kallsyms])
\tffffffff8158c594 generic_perform_write ([kernel.kallsyms])
\t           fdfb6 pwritev64 (/usr/lib/x86_64-linux-gnu/libc.so.6)

postgres 200/200
\t          5d1f20 pglz_compress (/opt/pg/bin/postgres)

python 300/301
\tffffffff815eba49 clear_page_erms ([kernel.kallsyms])
\tffffffff821f51c6 exc_page_fault ([kernel.kallsyms])
\tffffffff81000c82 asm_exc_page_fault ([kernel.kallsyms])
\t          16e0a3 __memset_avx512_unaligned_erms (/usr/lib/x86_64-linux-gnu/libc.so.6)

Executor task l 400/412
\t    7f83ad648640 [unknown] ([unknown])
"""


def test_samples_are_read_with_their_process_and_leaf_first() -> None:
    found = list(samples(SCRIPT.splitlines()))
    assert [(s.pid, s.comm) for s in found] == [(0, "swapper"), (200, "postgres"), (200, "postgres"), (300, "python"),
                                                (400, "Executor task l")]
    assert found[1].leaf == "copy_folio_from_iter_atomic" and found[1].kernel and not found[1].page_fault
    assert found[2].leaf == "pglz_compress" and not found[2].kernel
    assert found[3].page_fault and found[3].kernel
    assert found[4].frames == (("[unknown]", "[unknown]"),)


def test_shares_leave_the_idle_task_out_and_split_user_and_kernel() -> None:
    result = shares(samples(SCRIPT.splitlines()), {200: "postgres", 300: "driver", 400: "jvm"})
    assert (result["samples"], result["busy_samples"]) == (5, 4)
    assert result["by_kind"] == {"postgres": {"user": 25.0, "kernel": 25.0}, "driver": {"user": 0.0, "kernel": 25.0},
                                 "jvm": {"user": 25.0, "kernel": 0.0}}
    assert result["page_faults"] == {"driver": 25.0}
    assert ["postgres", "copy_folio_from_iter_atomic", 25.0] in result["top_kernel_symbols"]
    assert all(kind != "other" for kind, _, _ in result["top_symbols"])


def test_a_process_that_ended_before_the_kinds_were_read_is_known_by_its_thread_name() -> None:
    result = shares(samples(SCRIPT.splitlines()), {})
    assert result["by_kind"] == {"postgres": {"user": 25.0, "kernel": 25.0}, "python": {"user": 0.0, "kernel": 25.0},
                                 "other": {"user": 25.0, "kernel": 0.0}}
