//! The session listing: a [`SessionQuery`]'s filters, order, keyset cursor and limit as one
//! statement.

use std::fmt::Write;

use teamster_store::{SessionOrder, SessionQuery};

use crate::columns::SESSION_COLUMNS;

/// The statement that lists sessions for a [`SessionQuery`]: its filters, its order (the key,
/// then the id), its keyset cursor and its limit. Returns the SQL and the text values of its
/// parameters `$1` to `$N`, in order; the limit is parameter `$N+1`.
///
/// The cursor is a row-value comparison, which the `(key, id)` indexes serve; both backends
/// compare the key's text bytewise (PostgreSQL through the columns' `"C"` collation), as the
/// cursor's producer does.
pub(crate) fn session_listing(query: &SessionQuery) -> (String, Vec<&str>) {
    let mut sql = format!("SELECT {SESSION_COLUMNS} FROM sessions WHERE 1 = 1");
    let mut values = Vec::new();
    // The viewer's own sessions, and those of the agents it manages.
    if let Some(creator) = query.visible_to.as_deref() {
        values.push(creator);
        let _ = write!(sql, " AND (created_by_id = ${}", values.len());
        if !query.or_of_agents.is_empty() {
            let first = values.len() + 1;
            values.extend(query.or_of_agents.iter().map(String::as_str));
            let parameters = (first..=values.len()).map(|index| format!("${index}")).collect::<Vec<_>>().join(", ");
            let _ = write!(sql, " OR agent_id IN ({parameters})");
        }
        if let Some(prefix) = query.or_created_by_prefix.as_deref() {
            values.push(prefix);
            let prefix = format!("CAST(${} AS TEXT)", values.len());
            let _ = write!(sql, " OR substr(created_by_id, 1, length({prefix})) = {prefix}");
        }
        sql.push(')');
    }
    let mut condition = |sql: &mut String, condition: std::fmt::Arguments<'_>, value| {
        values.push(value);
        // Writing to a String cannot fail.
        let _ = write!(sql, " AND {condition} ${}", values.len());
    };
    let filters = [
        ("created_by_id", query.created_by.as_deref()),
        ("agent_name", query.agent_name.as_deref()),
        ("agent_id", query.agent_id.as_deref()),
        ("kind", query.kind.map(|kind| kind.as_str())),
        ("id", query.session_id.as_deref()),
        ("resource_id", query.resource_id.as_deref()),
    ];
    for (column, value) in filters {
        if let Some(value) = value {
            condition(&mut sql, format_args!("{column} ="), value);
        }
    }
    if let Some(from) = &query.created_from {
        condition(&mut sql, format_args!("created_at >="), from);
    }
    if let Some(to) = &query.created_to {
        condition(&mut sql, format_args!("created_at <="), to);
    }
    let key = match query.order_by {
        SessionOrder::CreatedAt => "created_at",
        SessionOrder::UpdatedAt => "updated_at",
    };
    let (after, direction) = if query.descending { ("<", "DESC") } else { (">", "ASC") };
    if let Some((cursor_key, cursor_id)) = &query.after {
        values.push(cursor_key);
        values.push(cursor_id);
        let _ = write!(sql, " AND ({key}, id) {after} (${}, ${})", values.len() - 1, values.len());
    }
    let _ = write!(sql, " ORDER BY {key} {direction}, id {direction} LIMIT ${}", values.len() + 1);
    (sql, values)
}
