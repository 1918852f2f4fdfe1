"""`specverify report RESULT.json ... -o DIR`: render audit / zoo results as an HTML page + Markdown."""

from __future__ import annotations

import argparse
import os

HELP = """\
Render audit results (and a zoo result) as a self-contained HTML page with a Markdown twin.

DIR receives index.html (no network assets), README.md, img/*.png and summary.json. It is built in
a temporary folder and swapped into place, so an interrupted or failed run leaves DIR as it was. An
existing DIR is replaced only if it is empty or an earlier report.

Several results of the same engine are seeded repeats: their p-values are pooled in the QQ plot.
Make them with, e.g.:
  for s in 0 1 2 3; do specverify audit reference --seed $s --json r$s.json -q; done
  specverify report r0.json r1.json r2.json r3.json -o reports/reference
Results of different engines (or a zoo result) add the engine x check matrix. A lab.json (from
`specverify lab`) re-renders the lab's page.

exit codes: 0 written, 2 usage or input error.
"""


def register(sub) -> None:
    p = sub.add_parser("report", help="render results as an HTML page and Markdown", description=HELP,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results", nargs="+", metavar="RESULT.json", help="audit or zoo result files")
    p.add_argument("-o", "--output", "--report", dest="output", required=True, metavar="DIR",
                   help="report folder to write (--report DIR, as in audit and zoo)")
    p.add_argument("--title", default=None, help="page title (default: from the engines)")
    p.add_argument("--embed", action="store_true", help="also inline the images in index.html (single-file page)")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar and no summary line")
    p.set_defaults(func=run)


def run(args) -> int:
    from specverify.errors import InputError
    from specverify.progress import Progress
    from specverify.render import write_report
    from specverify.render.analysis import check_result, load_json

    docs = [load_json(p) for p in args.results]
    kinds = [check_result(d, p) for d, p in zip(docs, args.results)]
    labs = [d for d, k in zip(docs, kinds) if k == "lab"]
    if labs:                                   # a lab.json re-renders the lab's page
        if len(docs) != 1:
            raise InputError("a lab result is reported on its own: give one lab.json")
        from specverify.lab.report import write_lab_report
        write_lab_report(labs[0], args.output)
        if not args.quiet:
            print(f"lab report written to {os.path.join(args.output, 'index.html')} and README.md")
        return 0
    progress = Progress(quiet=args.quiet)
    try:
        info = write_report(docs, args.output, title=args.title, embed=args.embed, progress=progress)
    finally:
        progress.done()
    if not args.quiet:
        verdicts = ", ".join(f"{e}: {v.upper()}" for e, v in info.engines.items())
        print(f"report written to {os.path.join(args.output, 'index.html')} and README.md"
              + (f" ({verdicts})" if verdicts else ""))
    return 0
