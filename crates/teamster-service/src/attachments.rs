//! Attached files at turn time: the non-image files of a turn's input written into the
//! session's sandbox, and the images of the conversation made whole for the model (a large one
//! is stored once as a file of the session and referenced from the events).

use std::borrow::Cow;

use base64::Engine as _;
use teamster_engine::{attachment_path, declared_media_type, split_data_url};
use teamster_llm::Image;
use teamster_protocol::input::{TurnInput, UserContentPart};
use teamster_protocol::{Event, UserContent};
use teamster_store::SessionStore;

use crate::input_files::{FILE_REFERENCE_SCHEME, parse_reference};
use crate::sandboxes::TurnSandbox;

/// The file parts of `input`, as (name, data).
fn file_parts(input: &[TurnInput]) -> impl Iterator<Item = (&str, &str)> {
    input.iter().flat_map(|item| match item {
        TurnInput::Message { content: UserContent::Parts(parts) } => parts.as_slice(),
        _ => &[],
    })
    .filter_map(|part| match part {
        UserContentPart::File { name, data } => Some((name.as_str(), data.as_str())),
        UserContentPart::Text { .. } => None,
    })
}

/// The digests of the session files `input` refers to.
pub(crate) fn stored_files(input: &[TurnInput]) -> impl Iterator<Item = &str> {
    file_parts(input).filter_map(|(_, data)| data.strip_prefix(FILE_REFERENCE_SCHEME).and_then(parse_reference).map(|(_, digest)| digest))
}

/// The bytes of a file part: decoded from its data URL, or read from the session's files.
async fn file_bytes(store: &dyn SessionStore, session_id: &str, data: &str) -> Result<Vec<u8>, String> {
    if let Some((_, payload)) = split_data_url(data) {
        return base64::engine::general_purpose::STANDARD.decode(payload).map_err(|error| error.to_string());
    }
    let (_, digest) = data
        .strip_prefix(FILE_REFERENCE_SCHEME)
        .and_then(parse_reference)
        .ok_or("the file is neither a data URL nor a stored file's reference")?;
    store.get_file(session_id, digest).await.map(|file| file.data).map_err(|error| error.to_string())
}

/// Writes the files of `input` that are not native images into the sandbox, where the model is
/// told they are. Writing again (a resumed turn) replaces them with the same bytes.
pub(crate) async fn write_into_sandbox(
    store: &dyn SessionStore,
    session_id: &str,
    sandbox: &TurnSandbox,
    input: &[TurnInput],
) -> Result<(), String> {
    for (name, data) in file_parts(input) {
        if declared_media_type(data).is_some_and(Image::is_native) {
            continue;
        }
        let path = attachment_path(name);
        let bytes = file_bytes(store, session_id, data)
            .await
            .map_err(|error| format!("The attached file {name:?} could not be read: {error}."))?;
        sandbox
            .provider
            .write_file(&sandbox.sandbox_id, &path, &bytes)
            .await
            .map_err(|error| format!("The attached file {name:?} could not be put in the sandbox: {error}."))?;
    }
    Ok(())
}

/// `history` with every stored image a message references replaced by its data URL, so the
/// model sees it; borrowed as it is when there is none. An image that cannot be read stays a
/// reference, and the model is told it is not available.
pub(crate) async fn with_images<'a>(store: &dyn SessionStore, session_id: &str, history: &'a [Event]) -> Cow<'a, [Event]> {
    let is_stored_image = |data: &str| {
        data.starts_with(FILE_REFERENCE_SCHEME) && declared_media_type(data).is_some_and(Image::is_native)
    };
    let references = |event: &Event| match event {
        Event::TurnCreated(created) => file_parts(&created.input).any(|(_, data)| is_stored_image(data)),
        _ => false,
    };
    if !history.iter().any(references) {
        return Cow::Borrowed(history);
    }
    let mut history = history.to_vec();
    for event in &mut history {
        let Event::TurnCreated(created) = event else { continue };
        for item in &mut created.input {
            let TurnInput::Message { content: UserContent::Parts(parts) } = item else { continue };
            for part in parts {
                let UserContentPart::File { name, data } = part else { continue };
                if !is_stored_image(data) {
                    continue;
                }
                let media_type = declared_media_type(data).unwrap_or_default().to_owned();
                match file_bytes(store, session_id, data).await {
                    Ok(bytes) => {
                        let payload = base64::engine::general_purpose::STANDARD.encode(bytes);
                        *data = Image { media_type, data: payload }.data_url();
                    }
                    Err(error) => tracing::warn!(session_id, file = %name, %error, "an attached image cannot be read"),
                }
            }
        }
    }
    Cow::Owned(history)
}
