//! A turn's input, checked and made storable: bounded text, well-formed file parts, and large
//! files stored once as files of the session.
//!
//! A file part carries its bytes as a data URL (`data:<mime>;base64,<payload>`). One larger
//! than [`INLINE_FILE_CHARS`] is stored once in the session's files and replaced, in the turn
//! and in every event, by a reference of the form
//! `teamster-file:<mime>;sha256=<hex digest>;size=<bytes>`: an event then fits on one SSE line,
//! and the turn's record, its `turn.created` and the histories in memory hold a short string
//! instead of megabytes. A client may send such a reference back in the same session.
//! Every check runs before anything is stored, so a refused input leaves nothing behind.

use base64::Engine as _;
use teamster_protocol::input::{TurnInput, UserContentPart};
use teamster_protocol::sse::{MAX_STRING_CHARS, json_string_chars};
use teamster_protocol::{UserContent, timestamp};
use teamster_llm::Image;
use teamster_store::{SessionFile, SessionStore};

use crate::error::{Result, ServiceError};

/// File parts whose data URL is longer than this are stored as files of the session.
pub const INLINE_FILE_CHARS: usize = 64 * 1024;
/// The prefix of a reference to a stored file.
pub const FILE_REFERENCE_SCHEME: &str = "teamster-file:";
/// The largest file a message may attach, decoded: as base64, it fits the default 10 MiB body.
pub const MAX_ATTACHMENT_BYTES: usize = 7 * 1024 * 1024;
/// The longest file name and media type accepted.
const MAX_FILE_NAME_CHARS: usize = 255;
const MAX_MEDIA_TYPE_CHARS: usize = 127;

/// A file part's bytes, decoded, waiting to be stored.
pub(crate) struct PendingFile {
    digest: String,
    media_type: String,
    data: Vec<u8>,
}

/// Checks `input` and returns it as it is to be stored, with the files to store first. Text
/// must fit in an event line; file parts must be valid data URLs or references to files this
/// session has, at most [`MAX_ATTACHMENT_BYTES`], and images the model reads natively unless
/// the session's agent has a sandbox (`sandboxed`) to put other files in.
pub(crate) async fn prepare(
    store: &dyn SessionStore,
    session_id: &str,
    sandboxed: bool,
    mut input: Vec<TurnInput>,
) -> Result<(Vec<TurnInput>, Vec<PendingFile>)> {
    let mut pending = Vec::new();
    for (index, item) in input.iter_mut().enumerate() {
        match item {
            TurnInput::Message { content } => {
                let text_chars = match &*content {
                    UserContent::Text(text) => json_string_chars(text),
                    UserContent::Parts(parts) => parts
                        .iter()
                        .map(|part| match part {
                            UserContentPart::Text { text } => json_string_chars(text),
                            UserContentPart::File { .. } => 0,
                        })
                        .sum(),
                };
                if text_chars > MAX_STRING_CHARS {
                    return Err(ServiceError::TooLarge(format!(
                        "the text of input[{index}] takes {text_chars} characters as JSON, more than the {MAX_STRING_CHARS} \
                         a message may carry; attach longer text as a file"
                    )));
                }
                if let UserContent::Parts(parts) = content {
                    for part in parts {
                        if let UserContentPart::File { name, data } = part {
                            check_file_name(index, name)?;
                            if let Some(file) = prepare_file(store, session_id, sandboxed, index, name, data).await? {
                                *data = file.reference();
                                pending.push(file);
                            }
                        }
                    }
                }
            }
            TurnInput::ToolResponse { content, .. } => {
                let chars = json_string_chars(content);
                if chars > MAX_STRING_CHARS {
                    return Err(ServiceError::TooLarge(format!(
                        "the tool response in input[{index}] takes {chars} characters as JSON, more than the {MAX_STRING_CHARS} allowed"
                    )));
                }
            }
            TurnInput::ToolApproval { .. } => {}
        }
    }
    Ok((input, pending))
}

/// Stores the files of a prepared input.
pub(crate) async fn store_files(store: &dyn SessionStore, session_id: &str, files: Vec<PendingFile>) -> Result<()> {
    let created_at = timestamp::now();
    for file in files {
        let record = SessionFile {
            session_id: session_id.to_owned(),
            digest: file.digest,
            media_type: file.media_type,
            data: file.data,
            created_at: created_at.clone(),
        };
        store.put_file(&record).await?;
    }
    Ok(())
}

impl PendingFile {
    fn reference(&self) -> String {
        format!("{FILE_REFERENCE_SCHEME}{};sha256={};size={}", self.media_type, self.digest, self.data.len())
    }
}

fn check_file_name(index: usize, name: &str) -> Result<()> {
    if name.trim().is_empty() || name.chars().count() > MAX_FILE_NAME_CHARS || name.chars().any(char::is_control) {
        return Err(ServiceError::invalid_param(
            "input",
            format!("input[{index}]: a file name must be 1-{MAX_FILE_NAME_CHARS} characters without control characters"),
        ));
    }
    Ok(())
}

/// Checks one file part's data. A data URL that is short enough stays inline (`None`); a
/// longer one is decoded for storage. A reference must name a file of this session.
async fn prepare_file(
    store: &dyn SessionStore,
    session_id: &str,
    sandboxed: bool,
    index: usize,
    name: &str,
    data: &str,
) -> Result<Option<PendingFile>> {
    let invalid = |problem: String| ServiceError::invalid_param("input", format!("file {:?} in input[{index}]: {problem}", short(name)));
    let check_kind = |media_type: &str| {
        if sandboxed || Image::is_native(media_type) {
            return Ok(());
        }
        Err(invalid(format!(
            "{:?} is not an image type the model reads itself ({}); other files are put in the agent's sandbox, and \
             this agent has none (set config.sandbox.enabled)",
            short(media_type),
            Image::MEDIA_TYPES.join(", ")
        )))
    };
    let too_large = |size: usize| {
        ServiceError::TooLarge(format!(
            "file {:?} in input[{index}] has {size} bytes, more than the {MAX_ATTACHMENT_BYTES} a file may have",
            short(name)
        ))
    };
    if let Some(reference) = data.strip_prefix(FILE_REFERENCE_SCHEME) {
        let (media_type, digest) = parse_reference(reference).ok_or_else(|| {
            invalid(format!("a file reference has the form {FILE_REFERENCE_SCHEME}<mime>;sha256=<hex>;size=<bytes>"))
        })?;
        check_kind(media_type)?;
        return match store.get_file(session_id, digest).await {
            Ok(_) => Ok(None),
            Err(teamster_store::Error::NotFound(_)) => Err(invalid("this session has no such file".to_owned())),
            Err(other) => Err(other.into()),
        };
    }
    let Some((media_type, payload)) = data.strip_prefix("data:").and_then(|rest| rest.split_once(";base64,")) else {
        return Err(invalid("the data must be a data URL: data:<mime>;base64,<payload>".to_owned()));
    };
    if !is_media_type(media_type) {
        return Err(invalid(format!("{:?} is not a media type such as text/csv", short(media_type))));
    }
    check_kind(media_type)?;
    // Checked before decoding: base64 takes 4 characters for 3 bytes.
    let most_bytes = payload.len() / 4 * 3;
    if most_bytes > MAX_ATTACHMENT_BYTES + 2 {
        return Err(too_large(most_bytes));
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(payload)
        .map_err(|error| invalid(format!("the base64 payload is invalid: {error}")))?;
    if decoded.len() > MAX_ATTACHMENT_BYTES {
        return Err(too_large(decoded.len()));
    }
    if data.len() <= INLINE_FILE_CHARS {
        return Ok(None);
    }
    let digest = ring::digest::digest(&ring::digest::SHA256, &decoded);
    let digest = digest.as_ref().iter().map(|byte| format!("{byte:02x}")).collect();
    Ok(Some(PendingFile { digest, media_type: media_type.to_ascii_lowercase(), data: decoded }))
}

/// The media type and digest of a reference's `<mime>;sha256=<hex>;size=<bytes>`, if it has
/// that form.
pub(crate) fn parse_reference(reference: &str) -> Option<(&str, &str)> {
    let mut fields = reference.split(';');
    let media_type = fields.next()?;
    let digest = fields.next()?.strip_prefix("sha256=")?;
    let size = fields.next()?.strip_prefix("size=")?;
    let well_formed = is_media_type(media_type)
        && digest.len() == 64
        && digest.bytes().all(|byte| byte.is_ascii_digit() || (b'a'..=b'f').contains(&byte))
        && size.parse::<u64>().is_ok()
        && fields.next().is_none();
    well_formed.then_some((media_type, digest))
}

/// Whether `text` looks like `type/subtype`, in the characters media types use.
fn is_media_type(text: &str) -> bool {
    let token = |part: &str| {
        !part.is_empty() && part.bytes().all(|byte| byte.is_ascii_alphanumeric() || b"!#$&^_.+-".contains(&byte))
    };
    text.len() <= MAX_MEDIA_TYPE_CHARS && text.split_once('/').is_some_and(|(kind, subtype)| token(kind) && token(subtype))
}

/// At most the first 64 characters of a client's string, for error messages.
pub(crate) fn short(text: &str) -> String {
    match text.char_indices().nth(64) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_and_media_types_are_parsed_strictly() {
        let digest = "a".repeat(64);
        assert_eq!(parse_reference(&format!("application/pdf;sha256={digest};size=12")), Some(("application/pdf", digest.as_str())));
        for bad in [
            format!("application/pdf;sha256={digest}"),
            format!("application/pdf;sha256={};size=12", "A".repeat(64)),
            format!("pdf;sha256={digest};size=12"),
            format!("application/pdf;sha256={digest};size=-1"),
            format!("application/pdf;sha256={digest};size=1;x=y"),
        ] {
            assert_eq!(parse_reference(&bad), None, "{bad}");
        }
        assert!(is_media_type("text/csv") && is_media_type("application/vnd.ms-excel"));
        assert!(!is_media_type("text") && !is_media_type("text/") && !is_media_type("te xt/csv"));
    }
}

