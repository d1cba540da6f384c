"""The group controller's records: groups and trials as the store keeps them (the SQL lives in
``phalanx.store.sql.groups``; only the store package knows SQLAlchemy)."""

from __future__ import annotations

from phalanx.store.sql.groups import (
    GROUP_DONE,
    Group,
    Trial,
    add_trial,
    best_trial,
    count_trials,
    create_group,
    delete_group,
    get_group,
    link_experiment,
    list_groups,
    list_trials,
    resolve_group,
    sql_store,
    update_group,
    update_trial,
)

__all__ = [
    "GROUP_DONE",
    "Group",
    "Trial",
    "add_trial",
    "best_trial",
    "count_trials",
    "create_group",
    "delete_group",
    "get_group",
    "link_experiment",
    "list_groups",
    "list_trials",
    "resolve_group",
    "sql_store",
    "update_group",
    "update_trial",
]
