//! Files attached to user messages, as the model sees them.
//!
//! An image of a type vision models read ([`Image::is_native`]) goes with its message in the
//! provider's own format. Any other file is written by the service into the session's sandbox,
//! at [`attachment_path`], and the message names that path, so the model reads the file with
//! code. Both are decided from the file part alone, so every replica and every later turn tells
//! the model the same thing.

use teamster_llm::{Image, Message};
use teamster_protocol::UserContent;
use teamster_protocol::input::UserContentPart;

/// The directory of the sandbox that attached files are written to.
pub const ATTACHMENTS_DIR: &str = "/workspace/attachments";
/// The longest file name kept in an attachment's path.
const MAX_NAME_CHARS: usize = 128;

/// Where in the sandbox a non-image file attached as `name` is: its last path component, with
/// every character but ASCII letters, digits, `.`, `_` and `-` made `_`, and no leading dot.
pub fn attachment_path(name: &str) -> String {
    let base = name.rsplit(['/', '\\']).next().unwrap_or_default();
    let safe: String = base
        .chars()
        .take(MAX_NAME_CHARS)
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') { c } else { '_' })
        .collect();
    let safe = safe.trim_start_matches('.');
    let safe = if safe.is_empty() { "file" } else { safe };
    format!("{ATTACHMENTS_DIR}/{safe}")
}

/// The media type and base64 payload of a `data:<mime>;base64,<payload>` URL.
pub fn split_data_url(data: &str) -> Option<(&str, &str)> {
    data.strip_prefix("data:").and_then(|rest| rest.split_once(";base64,"))
}

/// The media type a file part declares, from its data URL or its stored file's reference
/// (`teamster-file:<mime>;...`).
pub fn declared_media_type(data: &str) -> Option<&str> {
    match split_data_url(data) {
        Some((media_type, _)) => Some(media_type),
        None => data.split_once(':').and_then(|(_, rest)| rest.split(';').next()),
    }
}

/// The chat message for a user's message: its texts, a line naming each attached file, and
/// the native images themselves.
pub(crate) fn user_message(content: &UserContent) -> Message {
    let parts = match content {
        UserContent::Text(text) => return Message::user(text.clone()),
        UserContent::Parts(parts) => parts,
    };
    let mut lines = Vec::new();
    let mut images = Vec::new();
    for part in parts {
        match part {
            UserContentPart::Text { text } => lines.push(text.clone()),
            UserContentPart::File { name, data } => {
                let is_image = declared_media_type(data).is_some_and(Image::is_native);
                match split_data_url(data) {
                    Some((media_type, payload)) if is_image => {
                        lines.push(format!("[attached image: {name}]"));
                        images.push(Image { media_type: media_type.to_ascii_lowercase(), data: payload.to_owned() });
                    }
                    // A stored image that could not be loaded for this turn.
                    _ if is_image => lines.push(format!("[attached image: {name} (not available)]")),
                    _ => lines.push(format!("[attached file: {name}, saved in the sandbox at {}]", attachment_path(name))),
                }
            }
        }
    }
    Message::User { content: lines.join("\n"), images }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attachment_paths_stay_in_the_attachments_directory() {
        for (name, path) in [
            ("report.csv", "/workspace/attachments/report.csv"),
            ("../../etc/passwd", "/workspace/attachments/passwd"),
            ("C:\\Users\\me\\data 1.pdf", "/workspace/attachments/data_1.pdf"),
            ("..", "/workspace/attachments/file"),
            (".hidden", "/workspace/attachments/hidden"),
            ("naïve.txt", "/workspace/attachments/na_ve.txt"),
            ("dir/", "/workspace/attachments/file"),
        ] {
            assert_eq!(attachment_path(name), path, "{name}");
        }
        assert_eq!(attachment_path(&"a".repeat(500)).len(), ATTACHMENTS_DIR.len() + 1 + MAX_NAME_CHARS);
    }

    #[test]
    fn images_go_natively_and_other_files_are_named_by_path() {
        let content: UserContent = serde_json::from_str(
            r#"[{"type":"text","text":"look"},
                {"type":"file","name":"a.png","data":"data:image/PNG;base64,iVBO"},
                {"type":"file","name":"b.csv","data":"data:text/csv;base64,YSxi"},
                {"type":"file","name":"c.jpg","data":"teamster-file:image/jpeg;sha256=00;size=3"}]"#,
        )
        .unwrap();
        let Message::User { content, images } = user_message(&content) else { panic!("not a user message") };
        assert_eq!(
            content,
            "look\n[attached image: a.png]\n[attached file: b.csv, saved in the sandbox at /workspace/attachments/b.csv]\n\
             [attached image: c.jpg (not available)]"
        );
        assert_eq!(images, vec![Image { media_type: "image/png".into(), data: "iVBO".into() }]);
    }
}
