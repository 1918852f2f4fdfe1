"""The renderer: audit and zoo results -> an HTML page and its Markdown twin (`specverify report`), and the
lab's page (`specverify lab`). Folders are written atomically; plots are matplotlib (Agg) PNGs.

    from specverify.render import write_report
    write_report([result.to_dict()], "reports/reference")
"""

from .audit_report import ReportInfo, build_document, report_from_files, write_report

__all__ = ["ReportInfo", "build_document", "report_from_files", "write_report"]
