"""The dashboard's pages, one module per subject: sessions (list, player), diff, teams (projects,
members, keys, audit)."""
