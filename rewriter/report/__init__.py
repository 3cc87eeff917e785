"""Reports of a job: report.json / report.md, report.html, the int8 section, generated tables."""
