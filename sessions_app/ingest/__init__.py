"""The one write path: every event reaches the database through here.

    formats/ (bytes -> canonical events) -> rows.py (seq, running totals, pairing, keyframes,
    hash chain) -> writer.py (raw bulk insert, one transaction per append)

`importing` reads files (uploads, the command line, the demo), `live` appends the API's batches,
`uploads` keeps received files; all of them call `writer.append_events`.
"""
