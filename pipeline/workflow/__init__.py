"""The workflow's glue, out of the .smk files so that pytest, ruff and duplicate-code scans see it: the
file layout (paths). The rules in workflow/rules/ import from here and read like a table of contents."""
