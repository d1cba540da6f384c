"""Alembic migrations of the SQL store, run automatically when a store is opened.

HEAD names the newest revision so that opening an up-to-date store needs no Alembic import; a test
checks it against the scripts (and the scripts against the tables of store.sql.models).
"""

HEAD = "0021_params_value_text_on_sqlite"
