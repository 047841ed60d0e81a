"""Reference pages generated from the code, so the documentation cannot drift from it.

Each module turns one source of truth into Markdown: the CLI's argument parser, the
settings models, the CRDs' schemas, the Prometheus registries and the gRPC protos. The docs
site's build (docs/gen_reference.py, run by mkdocs-gen-files) writes them under reference/.
"""
