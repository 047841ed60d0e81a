"""mkdocs-gen-files script: the reference pages, generated from the code at each build."""

from pathlib import Path

import mkdocs_gen_files

from sandfleet.reference.pages import reference_pages

ROOT = Path(__file__).resolve().parents[1]

for name, text in reference_pages(ROOT).items():
    with mkdocs_gen_files.open(f"reference/{name}", "w") as page:
        page.write(text)
