//! Drawing the chat: the transcript (scrolled to its end unless the user scrolled back), the
//! prompt being answered, a status line with the spinner, usage and cost, and the input line.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span, Text};
use ratatui::widgets::{Block, Borders, Paragraph, Wrap};

use super::app::{App, Busy};
use super::prompt::Prompt;
use super::transcript::{Tone, elide};

const SPINNER: [&str; 10] = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"];
/// The most lines a prompt's detail (a tool's arguments, a plan) takes on screen.
const MAX_DETAIL_LINES: usize = 12;
/// The most tasks the task panel lists.
const MAX_TASK_LINES: usize = 6;

/// Draws the whole chat; `waited` is how long the current wait has lasted, in seconds.
pub fn draw(frame: &mut Frame<'_>, app: &App, waited: u64) {
    let prompt = app.prompts.front().map(|prompt| prompt_text(prompt, app));
    let prompt_height = prompt.as_ref().map_or(0, |text| {
        let rows = Paragraph::new(text.clone()).wrap(Wrap { trim: false }).line_count(frame.area().width.saturating_sub(2));
        (u16::try_from(rows).unwrap_or(u16::MAX).saturating_add(2)).min(frame.area().height / 2)
    });
    let tasks = task_text(app);
    let tasks_height = if tasks.lines.is_empty() { 0 } else { tasks.lines.len() as u16 + 2 };
    let [transcript_area, tasks_area, prompt_area, status_area, input_area] = Layout::vertical([
        Constraint::Min(1),
        Constraint::Length(tasks_height),
        Constraint::Length(prompt_height),
        Constraint::Length(1),
        Constraint::Length(3),
    ])
    .areas(frame.area());
    draw_transcript(frame, app, transcript_area);
    if tasks_height > 0 {
        let done = app.tasks.iter().filter(|(status, _)| status == "completed").count();
        let title = format!(" tasks {done}/{} ", app.tasks.len());
        frame.render_widget(Paragraph::new(tasks).block(Block::default().borders(Borders::ALL).title(title)), tasks_area);
    }
    if let Some(text) = prompt {
        let title = match app.prompts.front() {
            Some(prompt) if prompt.is_plan() => " plan for approval ",
            Some(Prompt::Approval { .. }) => " approval ",
            Some(Prompt::Question { .. }) => " question ",
            _ => " authorization ",
        };
        let block = Block::default().borders(Borders::ALL).title(title).border_style(Style::default().fg(Color::Yellow));
        frame.render_widget(Paragraph::new(text).block(block).wrap(Wrap { trim: false }), prompt_area);
    }
    frame.render_widget(Paragraph::new(status_line(app, waited)), status_area);
    let title = match app.prompts.front() {
        Some(Prompt::Approval { denying: true, .. }) => " why deny? (Enter sends, Esc goes back) ".to_owned(),
        Some(Prompt::Approval { .. }) => " y allow · n deny · a always allow ".to_owned(),
        Some(Prompt::Question { .. }) => " your answer (or choose above) ".to_owned(),
        Some(Prompt::Authorize { .. }) => " press Enter once authorized ".to_owned(),
        None if app.waiting() => " message (Enter queues a follow-up; /steer TEXT steers) ".to_owned(),
        None if !app.attachments.is_empty() => format!(" message (+{} attached) ", app.attachments.len()),
        None => " message ".to_owned(),
    };
    let (before, after) = app.input.split();
    let shown = format!("{}▏{after}", tail(before, input_area.width.saturating_sub(4) as usize));
    let input = Paragraph::new(shown)
        .block(Block::default().borders(Borders::ALL).title(title));
    frame.render_widget(input, input_area);
}

fn draw_transcript(frame: &mut Frame<'_>, app: &App, area: Rect) {
    let lines: Vec<Line<'_>> = app
        .transcript
        .rows(app.show_reasoning)
        .into_iter()
        .map(|row| {
            let mut spans = vec![Span::styled("│ ".repeat(row.depth), Style::default().fg(Color::Magenta))];
            spans.push(Span::styled(row.text, style(row.tone)));
            Line::from(spans)
        })
        .collect();
    let paragraph = Paragraph::new(Text::from(lines)).wrap(Wrap { trim: false });
    let total = paragraph.line_count(area.width);
    let bottom = total.saturating_sub(area.height as usize);
    let top = bottom.saturating_sub(app.scroll_back);
    frame.render_widget(paragraph.scroll((u16::try_from(top).unwrap_or(u16::MAX), 0)), area);
}

fn style(tone: Tone) -> Style {
    match tone {
        Tone::User => Style::default().fg(Color::Cyan).add_modifier(Modifier::BOLD),
        Tone::Assistant => Style::default(),
        Tone::Reasoning => Style::default().fg(Color::DarkGray).add_modifier(Modifier::DIM | Modifier::ITALIC),
        Tone::Tool => Style::default().fg(Color::Yellow),
        Tone::ToolResult => Style::default().fg(Color::Gray),
        Tone::Thread => Style::default().fg(Color::Magenta),
        Tone::Note => Style::default().fg(Color::DarkGray),
        Tone::Error => Style::default().fg(Color::Red),
        Tone::Usage => Style::default().fg(Color::Green).add_modifier(Modifier::DIM),
        Tone::Link => Style::default().fg(Color::Blue).add_modifier(Modifier::UNDERLINED),
    }
}

fn status_line(app: &App, waited: u64) -> Line<'static> {
    let mut spans = Vec::new();
    let what = match app.busy {
        Busy::Idle if app.prompts.is_empty() => None,
        Busy::Idle => Some("waiting for your answer".to_owned()),
        Busy::Starting => Some("starting the turn".to_owned()),
        Busy::Running => Some("working (Ctrl-C cancels)".to_owned()),
        Busy::Cancelling => Some("cancelling".to_owned()),
        Busy::Loading => Some("loading the session".to_owned()),
    };
    if let Some(what) = what {
        let spinner = if app.waiting() { SPINNER[app.tick % SPINNER.len()] } else { "…" };
        spans.push(Span::styled(format!("{spinner} {what} {waited}s  "), Style::default().fg(Color::Yellow)));
    } else if app.scroll_back > 0 {
        spans.push(Span::styled("scrolled back (PgDn returns)  ".to_owned(), Style::default().fg(Color::Yellow)));
    } else if app.exit_armed {
        spans.push(Span::styled("Ctrl-C again exits  ".to_owned(), Style::default().fg(Color::Yellow)));
    }
    let mut facts = vec![app.agent.clone(), app.session_id.clone().unwrap_or_else(|| "new session".to_owned())];
    if let Some(mode) = &app.mode {
        facts.push(format!("mode {mode}"));
    }
    let totals = &app.transcript.totals;
    facts.push(format!("{}↑ {}↓ tokens", totals.input_tokens, totals.output_tokens));
    if let Some(cost) = totals.cost_usd {
        facts.push(format!("${cost:.4}"));
    }
    spans.push(Span::styled(facts.join(" · "), Style::default().fg(Color::DarkGray)));
    Line::from(spans)
}

/// The task list panel: the unfinished tasks first, at most [`MAX_TASK_LINES`] lines.
fn task_text(app: &App) -> Text<'static> {
    let mut lines: Vec<Line<'static>> = Vec::new();
    let open = app.tasks.iter().filter(|(status, _)| status != "completed");
    let done = app.tasks.iter().filter(|(status, _)| status == "completed");
    for (status, title) in open.chain(done).take(MAX_TASK_LINES) {
        let (mark, style) = match status.as_str() {
            "completed" => ("[x]", Style::default().fg(Color::DarkGray)),
            "in_progress" => ("[~]", Style::default().fg(Color::Yellow)),
            _ => ("[ ]", Style::default()),
        };
        lines.push(Line::styled(format!("{mark} {title}"), style));
    }
    if app.tasks.len() > MAX_TASK_LINES {
        lines.push(Line::styled(format!("… {} more (/tasks)", app.tasks.len() - MAX_TASK_LINES), Style::default().fg(Color::DarkGray)));
    }
    Text::from(lines)
}

/// The prompt panel's text.
fn prompt_text(prompt: &Prompt, app: &App) -> Text<'static> {
    let mut lines = Vec::new();
    let thread = match prompt {
        Prompt::Approval { thread_id, .. } | Prompt::Question { thread_id, .. } => app.transcript.thread_title(thread_id),
        Prompt::Authorize { .. } => None,
    };
    if let Some(title) = thread {
        lines.push(Line::styled(format!("from the sub-agent {title}:"), style(Tone::Thread)));
    }
    match prompt {
        Prompt::Approval { tool, arguments, denying, .. } => {
            if prompt.is_plan() {
                let plan: serde_json::Value = serde_json::from_str(arguments).unwrap_or_default();
                let title = plan["title"].as_str().unwrap_or("the plan");
                lines.push(Line::from(format!("The agent submits {title}:")));
                detail(&mut lines, plan["plan"].as_str().unwrap_or(arguments));
            } else {
                lines.push(Line::from(format!("Run {tool}?")));
                detail(&mut lines, &pretty(arguments));
            }
            let keys = if *denying { "type why, then Enter" } else { "y allow · n deny (with a reason) · a always allow this tool" };
            lines.push(Line::styled(keys.to_owned(), Style::default().fg(Color::Yellow)));
        }
        Prompt::Question { question, choices, multi_select, cursor, ticked, .. } => {
            lines.push(Line::styled(question.clone(), Style::default().add_modifier(Modifier::BOLD)));
            for (index, choice) in choices.iter().enumerate() {
                let pointer = if index == *cursor { "▶" } else { " " };
                let tick = match (multi_select, ticked.contains(&index)) {
                    (false, _) => "",
                    (true, true) => "[x] ",
                    (true, false) => "[ ] ",
                };
                let description = choice.description.as_deref().map(|text| format!(" — {text}")).unwrap_or_default();
                let style = if index == *cursor { Style::default().fg(Color::Cyan) } else { Style::default() };
                lines.push(Line::styled(format!("{pointer} {tick}{}{description}", choice.label), style));
            }
            let keys = match (choices.is_empty(), multi_select) {
                (true, _) => "type your answer, then Enter",
                (false, false) => "↑/↓ choose · Enter answers · or type another answer",
                (false, true) => "↑/↓ move · space ticks · Enter answers · or type another answer",
            };
            lines.push(Line::styled(keys.to_owned(), Style::default().fg(Color::Yellow)));
        }
        Prompt::Authorize { links } => {
            for (name, url) in links {
                lines.push(Line::from(format!("{name} needs your authorization: open")));
                lines.push(Line::styled(url.clone(), style(Tone::Link)));
            }
            lines.push(Line::styled("then press Enter to resume the turn".to_owned(), Style::default().fg(Color::Yellow)));
        }
    }
    Text::from(lines)
}

fn detail(lines: &mut Vec<Line<'static>>, text: &str) {
    let text = elide(text, 2_000);
    let all: Vec<&str> = text.lines().collect();
    for line in all.iter().take(MAX_DETAIL_LINES) {
        lines.push(Line::styled(format!("  {line}"), Style::default().fg(Color::Gray)));
    }
    if all.len() > MAX_DETAIL_LINES {
        lines.push(Line::styled(format!("  … {} more lines", all.len() - MAX_DETAIL_LINES), Style::default().fg(Color::Gray)));
    }
}

/// JSON arguments indented, or as they are when they are not JSON.
fn pretty(arguments: &str) -> String {
    serde_json::from_str::<serde_json::Value>(arguments)
        .ok()
        .and_then(|value| serde_json::to_string_pretty(&value).ok())
        .unwrap_or_else(|| arguments.to_owned())
}

/// The last `width` characters of `text`, so the end of a long line stays in view.
fn tail(text: &str, width: usize) -> &str {
    let count = text.chars().count();
    if count <= width {
        return text;
    }
    let skip = count - width;
    let start = text.char_indices().nth(skip).map_or(text.len(), |(index, _)| index);
    &text[start..]
}
