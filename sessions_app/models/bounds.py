"""The largest numbers a request may name.

Every id and every count or position column is 64 bits (BigAutoField, BigIntegerField). A
larger number never names a row, and it fails inside the database driver rather than in a
query (SQLite: OverflowError; PostgreSQL: "bigint out of range"), so the API's schemas and the
pages' forms refuse it first, as a 400 naming the parameter.
"""

# The largest value of a 64-bit column: the bound of ids.
MAX_ID = 2**63 - 1
# Positions (seq, step index, offset, keyset cursors) stop at 2**62, so that a page's end
# (offset + limit, after + 1) computed from one still fits the column.
MAX_POSITION = 2**62
