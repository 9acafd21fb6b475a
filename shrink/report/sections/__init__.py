"""The report's sections, one module each, in the order the report gives them.

Each ``add_*`` function appends its section's blocks to a :class:`shrink.report.blocks.Doc`
(and writes its figures, if any); :func:`shrink.report.build.write_report` calls them.
"""
