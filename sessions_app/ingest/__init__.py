"""The one write path: every event reaches the database through here.

    formats/ (bytes -> canonical events) -> rows.py (computes each row: seq, running totals,
    pairing, keyframes, hash chain) -> writer.py (the write workflow: create, append, finish,
    checkpoints; the raw bulk insert, one transaction per append)

`importing` reads files (uploads, the command line, the demo) and `live` appends the API's
batches, both through `writer.append_events`; `traces` settles OTLP spans through
`writer.append_and_finish`, `bundles` restores a bundle's stored rows through
`writer.append_stored_events`; `uploads` keeps received files.
"""
