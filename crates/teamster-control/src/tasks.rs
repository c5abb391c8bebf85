//! A session's task list: the agent keeps it with four tools, and every result carries the
//! whole list with a version that counts its changes. The list is therefore a fold of the
//! session's event log ([`task_list`]): the result of highest version wins, whatever order
//! parallel calls' results were recorded in. Nothing else stores it.

use std::collections::HashSet;
use std::sync::Mutex;

use async_trait::async_trait;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use teamster_protocol::control::{Task, TaskList, TaskStatus};
use teamster_protocol::{Event, ToolInfo};
use teamster_tools::{Tool, ToolAnnotations, ToolGate, ToolOutput, ToolSource};

const TASK_WRITE: &str = "task_write";
const TASK_UPDATE: &str = "task_update";
const TASK_COMPLETE: &str = "task_complete";
const TASK_CHECK: &str = "task_check";

/// The names of the task tools.
pub const TASK_TOOLS: [&str; 4] = [TASK_WRITE, TASK_UPDATE, TASK_COMPLETE, TASK_CHECK];

/// The most tasks a list holds.
const MAX_TASKS: usize = 100;
/// The longest title, and the longest notes, in characters.
const MAX_TITLE_CHARS: usize = 500;
const MAX_NOTES_CHARS: usize = 4000;
/// The longest task id, in bytes.
const MAX_ID_BYTES: usize = 64;

/// The session's task list during a turn, offered to the model as the task tools.
#[derive(Debug)]
pub struct TaskBoard {
    list: Mutex<TaskList>,
}

/// The session's task list as its history left it: the task tool result of highest version
/// (an empty list at version 0 when there is none).
pub fn task_list(events: &[Event]) -> TaskList {
    let task_calls: HashSet<&str> = events
        .iter()
        .filter_map(|event| match event {
            Event::ModelMessage(message) => message.tool_calls.as_ref(),
            _ => None,
        })
        .flatten()
        .filter(|call| TASK_TOOLS.contains(&call.function.name.as_str()))
        .map(|call| call.id.as_str())
        .collect();
    events
        .iter()
        .filter_map(|event| match event {
            Event::ToolResponse(response) if task_calls.contains(response.tool_call_id.as_str()) => {
                serde_json::from_str::<TaskList>(&response.content).ok()
            }
            _ => None,
        })
        .max_by_key(|list| list.version)
        .unwrap_or_default()
}

impl TaskBoard {
    /// The board of a session whose history is `events`.
    pub fn from_events(events: &[Event]) -> TaskBoard {
        TaskBoard { list: Mutex::new(task_list(events)) }
    }

    /// The list as it stands.
    pub fn current(&self) -> TaskList {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, TaskList> {
        self.list.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Applies a change to the list; on success the new version is the result.
    fn change(&self, apply: impl FnOnce(&mut Vec<Task>) -> Result<(), String>) -> ToolOutput {
        let mut list = self.lock();
        let mut tasks = list.tasks.clone();
        if let Err(message) = apply(&mut tasks) {
            return ToolOutput::error(message);
        }
        *list = TaskList::new(list.version + 1, tasks);
        ToolOutput::ok(serde_json::to_string(&*list).unwrap_or_default())
    }
}

/// A task as the model writes it in `task_write`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NewTask {
    #[serde(default)]
    id: Option<String>,
    title: String,
    #[serde(default)]
    status: TaskStatus,
    #[serde(default)]
    notes: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WriteArguments {
    tasks: Vec<NewTask>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct UpdateArguments {
    id: String,
    #[serde(default)]
    title: Option<String>,
    #[serde(default)]
    status: Option<TaskStatus>,
    #[serde(default)]
    notes: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CompleteArguments {
    id: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CheckArguments {}

fn parse<T: DeserializeOwned>(tool: &str, arguments: &str) -> Result<T, String> {
    serde_json::from_str(arguments).map_err(|error| format!("invalid arguments for {tool}: {error}"))
}

fn check_title(title: &str) -> Result<String, String> {
    let title = title.trim();
    if title.is_empty() || title.chars().count() > MAX_TITLE_CHARS {
        return Err(format!("a task's title has 1 to {MAX_TITLE_CHARS} characters"));
    }
    Ok(title.to_owned())
}

fn check_notes(notes: Option<String>) -> Result<Option<String>, String> {
    match notes {
        Some(notes) if notes.chars().count() > MAX_NOTES_CHARS => Err(format!("a task's notes have at most {MAX_NOTES_CHARS} characters")),
        notes => Ok(notes.filter(|notes| !notes.trim().is_empty())),
    }
}

fn check_id(id: &str) -> Result<(), String> {
    if id.is_empty() || id.len() > MAX_ID_BYTES || !id.bytes().all(|byte| byte.is_ascii_alphanumeric() || b"._-".contains(&byte)) {
        return Err(format!("{id:?} is not a task id: 1 to {MAX_ID_BYTES} letters, digits, '.', '_' and '-'"));
    }
    Ok(())
}

/// The list `task_write` asks for: ids checked and unique, the missing ones `task-<n>` with
/// numbers no given id uses.
fn written(new: Vec<NewTask>) -> Result<Vec<Task>, String> {
    if new.len() > MAX_TASKS {
        return Err(format!("a task list has at most {MAX_TASKS} tasks"));
    }
    let mut taken = HashSet::new();
    for id in new.iter().filter_map(|task| task.id.as_deref()) {
        check_id(id)?;
        if !taken.insert(id.to_owned()) {
            return Err(format!("two tasks have the id {id:?}"));
        }
    }
    let mut next = 1;
    let mut tasks = Vec::with_capacity(new.len());
    for task in new {
        let id = match task.id {
            Some(id) => id,
            None => loop {
                let candidate = format!("task-{next}");
                next += 1;
                if !taken.contains(&candidate) {
                    break candidate;
                }
            },
        };
        tasks.push(Task { id, title: check_title(&task.title)?, status: task.status, notes: check_notes(task.notes)? });
    }
    Ok(tasks)
}

fn find<'a>(tasks: &'a mut [Task], id: &str) -> Result<&'a mut Task, String> {
    match tasks.iter().position(|task| task.id == id) {
        Some(index) => Ok(&mut tasks[index]),
        None => Err(format!("there is no task {id:?}; task_check lists the tasks")),
    }
}

fn definition(name: &str, description: &str, parameters: serde_json::Value) -> Tool {
    Tool {
        name: name.to_owned(),
        description: description.to_owned(),
        input_schema: parameters,
        info: ToolInfo::System { name: name.to_owned() },
        annotations: ToolAnnotations { read_only: name == TASK_CHECK, destructive: false, idempotent: name == TASK_CHECK },
        gate: ToolGate::None,
    }
}

/// The schema of a task's fields, `required` among them.
fn task_schema(required: &str) -> serde_json::Value {
    serde_json::json!({
        "type": "object",
        "properties": {
            "id": {"type": "string"},
            "title": {"type": "string"},
            "status": {"type": "string", "enum": ["pending", "in_progress", "completed"]},
            "notes": {"type": "string"},
        },
        "required": [required],
        "additionalProperties": false,
    })
}

#[async_trait]
impl ToolSource for TaskBoard {
    async fn list(&self) -> Result<Vec<Tool>, teamster_tools::Error> {
        Ok(vec![
            definition(
                TASK_WRITE,
                "Creates or replaces this session's task list: use it to plan work of several steps and keep \
                 the user informed. Tasks without an id get one. Returns the list.",
                serde_json::json!({
                    "type": "object",
                    "properties": {"tasks": {"type": "array", "maxItems": MAX_TASKS, "items": task_schema("title")}},
                    "required": ["tasks"],
                    "additionalProperties": false,
                }),
            ),
            definition(
                TASK_UPDATE,
                "Changes one task's title, status or notes. Returns the list.",
                task_schema("id"),
            ),
            definition(
                TASK_COMPLETE,
                "Marks one task completed. Returns the list.",
                serde_json::json!({
                    "type": "object",
                    "properties": {"id": {"type": "string"}},
                    "required": ["id"],
                    "additionalProperties": false,
                }),
            ),
            definition(
                TASK_CHECK,
                "Returns the task list, how many tasks are in each state, and the tasks not yet completed.",
                serde_json::json!({"type": "object", "properties": {}, "additionalProperties": false}),
            ),
        ])
    }

    async fn call(&self, name: &str, arguments: &str) -> ToolOutput {
        let result = match name {
            TASK_WRITE => parse::<WriteArguments>(name, arguments).map(|arguments| {
                self.change(|tasks| {
                    *tasks = written(arguments.tasks)?;
                    Ok(())
                })
            }),
            TASK_UPDATE => parse::<UpdateArguments>(name, arguments).map(|arguments| {
                self.change(|tasks| {
                    let title = arguments.title.as_deref().map(check_title).transpose()?;
                    let notes = check_notes(arguments.notes)?;
                    let task = find(tasks, &arguments.id)?;
                    if let Some(title) = title {
                        task.title = title;
                    }
                    if let Some(status) = arguments.status {
                        task.status = status;
                    }
                    if notes.is_some() {
                        task.notes = notes;
                    }
                    Ok(())
                })
            }),
            TASK_COMPLETE => parse::<CompleteArguments>(name, arguments).map(|arguments| {
                self.change(|tasks| {
                    find(tasks, &arguments.id)?.status = TaskStatus::Completed;
                    Ok(())
                })
            }),
            TASK_CHECK => parse::<CheckArguments>(name, arguments).map(|_| {
                let list = self.current();
                let mut result = serde_json::to_value(&list).unwrap_or_default();
                let incomplete: Vec<&Task> = list.tasks.iter().filter(|task| task.status != TaskStatus::Completed).collect();
                result["incomplete"] = serde_json::to_value(incomplete).unwrap_or_default();
                ToolOutput::ok(result.to_string())
            }),
            _ => return ToolOutput::error(format!("unknown tool {name:?}")),
        };
        result.unwrap_or_else(ToolOutput::error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn call(board: &TaskBoard, name: &str, arguments: serde_json::Value) -> Result<serde_json::Value, String> {
        let output = board.call(name, &arguments.to_string()).await;
        if output.is_error { Err(output.content) } else { Ok(serde_json::from_str(&output.content).unwrap()) }
    }

    #[tokio::test]
    async fn the_tools_keep_a_versioned_list() {
        let board = TaskBoard::from_events(&[]);
        let written = call(&board, TASK_WRITE, serde_json::json!({"tasks": [
            {"title": "Read the CSV"}, {"id": "task-1x", "title": " Sum it ", "status": "in_progress"}, {"title": "Report"},
        ]}))
        .await
        .unwrap();
        assert_eq!(written["version"], 1);
        let ids: Vec<&str> = written["tasks"].as_array().unwrap().iter().map(|task| task["id"].as_str().unwrap()).collect();
        assert_eq!(ids, ["task-1", "task-1x", "task-2"]);
        assert_eq!(written["tasks"][1]["title"], "Sum it");

        call(&board, TASK_UPDATE, serde_json::json!({"id": "task-2", "notes": "as a table"})).await.unwrap();
        let completed = call(&board, TASK_COMPLETE, serde_json::json!({"id": "task-1"})).await.unwrap();
        assert_eq!(completed["version"], 3);
        assert_eq!(completed["summary"], serde_json::json!({"total": 3, "pending": 1, "in_progress": 1, "completed": 1}));
        let checked = call(&board, TASK_CHECK, serde_json::json!({})).await.unwrap();
        assert_eq!(checked["version"], 3, "checking changes nothing");
        let incomplete: Vec<&str> = checked["incomplete"].as_array().unwrap().iter().map(|task| task["id"].as_str().unwrap()).collect();
        assert_eq!(incomplete, ["task-1x", "task-2"]);
        assert_eq!(board.current().tasks[2].notes.as_deref(), Some("as a table"));
    }

    #[tokio::test]
    async fn bad_calls_are_failed_calls_that_change_nothing() {
        let board = TaskBoard::from_events(&[]);
        call(&board, TASK_WRITE, serde_json::json!({"tasks": [{"id": "a", "title": "A"}]})).await.unwrap();
        let many: Vec<serde_json::Value> = (0..=MAX_TASKS).map(|i| serde_json::json!({"title": format!("t{i}")})).collect();
        let cases = [
            (TASK_UPDATE, serde_json::json!({"id": "nope", "status": "completed"}), "there is no task \"nope\""),
            (TASK_COMPLETE, serde_json::json!({"task": "a"}), "invalid arguments for task_complete"),
            (TASK_WRITE, serde_json::json!({"tasks": [{"id": "x", "title": "1"}, {"id": "x", "title": "2"}]}), "two tasks have the id"),
            (TASK_WRITE, serde_json::json!({"tasks": [{"id": "a b", "title": "1"}]}), "is not a task id"),
            (TASK_WRITE, serde_json::json!({"tasks": [{"title": "  "}]}), "title has 1 to"),
            (TASK_WRITE, serde_json::json!({"tasks": many}), "at most 100 tasks"),
            (TASK_UPDATE, serde_json::json!({"id": "a", "status": "done"}), "invalid arguments"),
            ("task_delete", serde_json::json!({}), "unknown tool"),
        ];
        for (tool, arguments, expected) in cases {
            let error = call(&board, tool, arguments.clone()).await.unwrap_err();
            assert!(error.contains(expected), "{tool} {arguments}: {error}");
        }
        assert_eq!(board.current().version, 1);
    }

    fn event(value: serde_json::Value) -> Event {
        serde_json::from_value(value).unwrap()
    }

    fn message_with_calls(calls: &[(&str, &str)]) -> Event {
        let calls: Vec<serde_json::Value> = calls
            .iter()
            .map(|(id, name)| serde_json::json!({"id": id, "type": "function", "function": {"name": name, "arguments": "{}"},
                                                  "tool_info": {"type": "truefoundry-system", "name": name}}))
            .collect();
        event(serde_json::json!({"type": "model.message", "id": "m", "thread_id": "main", "created_at": "2026-11-25T00:00:00.000Z",
                                  "content": null, "tool_calls": calls, "finish_reason": "tool_calls"}))
    }

    fn response(call_id: &str, content: &str) -> Event {
        event(serde_json::json!({"type": "tool.response", "id": format!("evt_{call_id}"), "thread_id": "main",
                                  "created_at": "2026-11-25T00:00:00.000Z", "tool_call_id": call_id, "content": content}))
    }

    #[test]
    fn the_list_is_the_task_result_of_highest_version_in_the_log() {
        let list = |version: u64, title: &str| {
            serde_json::to_string(&TaskList::new(version, vec![Task { id: "a".into(), title: title.into(), status: TaskStatus::Pending, notes: None }]))
                .unwrap()
        };
        let events = vec![
            message_with_calls(&[("c1", TASK_WRITE), ("c2", TASK_UPDATE), ("c3", "other_tool"), ("c4", TASK_UPDATE)]),
            // Parallel calls' results recorded out of order: version 3 wins.
            response("c2", &list(3, "third")),
            response("c1", &list(2, "second")),
            // Another tool's result that looks like a list, and a failed task call, count for nothing.
            response("c3", &list(9, "not a task result")),
            response("c4", "Error: there is no task \"x\""),
        ];
        let folded = task_list(&events);
        assert_eq!((folded.version, folded.tasks[0].title.as_str()), (3, "third"));
        assert_eq!(TaskBoard::from_events(&events).current(), folded);
        assert_eq!(task_list(&[]), TaskList::default());
    }
}
