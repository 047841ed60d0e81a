"""Self-contained HTML pages: a run (`show --html`), the runs list and the eval's report.html.

Every page opens from disk: styles inline, plots as inline SVG, no script, no network.
"""
