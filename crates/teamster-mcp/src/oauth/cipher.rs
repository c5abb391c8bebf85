//! Sealing tokens for storage: [`TokenCipher`] (ChaCha20-Poly1305 under a [`TokenKey`]) and
//! loading the key from the environment or a key file.
//!
//! A sealed value is text: `v1.<key id>.<base64url(nonce | ciphertext | tag)>`. The key id (8 hex
//! digits of a hash of the key) tells a value sealed under another key from a tampered one; the
//! nonce is random per seal; the caller's `context` (e.g. the user and server the row belongs
//! to) is authenticated with it, so a sealed value copied to another row does not open.

use std::fmt;
use std::fs;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
use ring::aead::{Aad, CHACHA20_POLY1305, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::pkce::random_bytes;

const VERSION: &str = "v1";

/// The longest sealed text opened; tokens are far smaller.
const MAX_SEALED_CHARS: usize = 64 << 10;

/// The longest key file read.
const MAX_KEY_FILE_BYTES: u64 = 1024;

/// Why a sealed value could not be made or opened.
#[derive(Debug, thiserror::Error)]
pub enum CipherError {
    #[error("the sealed value is not in the sealed format")]
    Malformed,
    #[error("the sealed value was sealed with another key")]
    WrongKey,
    #[error("the sealed value was altered, or belongs to another context")]
    Tampered,
    #[error("the sealed value does not hold what was expected")]
    Decode,
    #[error("the value cannot be serialized")]
    Encode,
    #[error("the system random number generator failed")]
    Random,
}

/// Why a token key could not be loaded or created.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("the token key is not 32 bytes in base64")]
    Invalid,
    #[error("cannot {action} the token key file {path}: {source}")]
    Io { action: &'static str, path: PathBuf, source: io::Error },
    #[error("the token key file {path} is accessible to other users (mode {mode:o}); restrict it to 0600")]
    Permissions { path: PathBuf, mode: u32 },
    #[error("the system random number generator failed")]
    Random,
}

/// A 256-bit key for sealing tokens.
#[derive(Clone, PartialEq, Eq)]
pub struct TokenKey([u8; 32]);

impl TokenKey {
    /// A new random key.
    pub fn generate() -> Result<TokenKey, KeyError> {
        random_bytes::<32>().map(TokenKey).map_err(|_| KeyError::Random)
    }

    /// Reads a key from base64 (standard or URL-safe, padded or not, surrounding whitespace
    /// ignored), e.g. an environment variable's value.
    pub fn from_base64(text: &str) -> Result<TokenKey, KeyError> {
        let text = text.trim();
        [STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD]
            .iter()
            .find_map(|engine| engine.decode(text).ok())
            .and_then(|bytes| <[u8; 32]>::try_from(bytes).ok())
            .map(TokenKey)
            .ok_or(KeyError::Invalid)
    }

    /// The key in standard base64, as [`from_base64`](Self::from_base64) and key files read it.
    pub fn to_base64(&self) -> String {
        STANDARD.encode(self.0)
    }

    /// The key from an environment variable's value when it is set and not empty, else from
    /// the key file at `key_file` (created on first use). Blocking: call it at start-up.
    pub fn load(env_value: Option<&str>, key_file: &Path) -> Result<TokenKey, KeyError> {
        match env_value.filter(|value| !value.trim().is_empty()) {
            Some(value) => TokenKey::from_base64(value),
            None => TokenKey::load_or_create(key_file),
        }
    }

    /// Reads the key file at `path`, or creates it with a new key, readable only by this user
    /// (mode 0600), if there is none. Racing processes end up with the same key: the file
    /// appears complete or not at all. A file other users may read is refused. Blocking.
    pub fn load_or_create(path: &Path) -> Result<TokenKey, KeyError> {
        match read_key_file(path) {
            Err(KeyError::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => {}
            other => return other,
        }
        let key = TokenKey::generate()?;
        create_key_file(path, &key)?;
        read_key_file(path)
    }
}

impl fmt::Debug for TokenKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TokenKey(<redacted>)")
    }
}

fn io_error(action: &'static str, path: &Path) -> impl FnOnce(io::Error) -> KeyError {
    move |source| KeyError::Io { action, path: path.to_owned(), source }
}

fn read_key_file(path: &Path) -> Result<TokenKey, KeyError> {
    let file = fs::File::open(path).map_err(io_error("open", path))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = file.metadata().map_err(io_error("inspect", path))?.permissions().mode();
        if mode & 0o077 != 0 {
            return Err(KeyError::Permissions { path: path.to_owned(), mode: mode & 0o777 });
        }
    }
    let mut text = String::new();
    file.take(MAX_KEY_FILE_BYTES).read_to_string(&mut text).map_err(io_error("read", path))?;
    TokenKey::from_base64(&text)
}

/// Writes the key to a private temporary file, then links it into place, which fails if
/// another process got there first (its key then wins).
fn create_key_file(path: &Path, key: &TokenKey) -> Result<(), KeyError> {
    if let Some(parent) = path.parent().filter(|parent| !parent.as_os_str().is_empty()) {
        fs::create_dir_all(parent).map_err(io_error("create the directory of", path))?;
    }
    let suffix: u64 = u64::from_le_bytes(random_bytes::<8>().map_err(|_| KeyError::Random)?);
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(format!(".{suffix:016x}.tmp"));
    let temporary = PathBuf::from(temporary);
    let written = write_private(&temporary, format!("{}\n", key.to_base64()).as_bytes())
        .map_err(io_error("write", path))
        .and_then(|()| match fs::hard_link(&temporary, path) {
            Ok(()) => Ok(()),
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => Ok(()),
            Err(error) => Err(io_error("create", path)(error)),
        });
    let _ = fs::remove_file(&temporary);
    written
}

fn write_private(path: &Path, contents: &[u8]) -> io::Result<()> {
    let mut options = fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(path)?;
    file.write_all(contents)?;
    file.sync_all()
}

/// Seals and opens values with ChaCha20-Poly1305 under one [`TokenKey`].
pub struct TokenCipher {
    key: LessSafeKey,
    key_id: String,
}

impl TokenCipher {
    pub fn new(key: &TokenKey) -> TokenCipher {
        let hash = ring::digest::digest(
            &ring::digest::SHA256,
            &[b"teamster token key id\0".as_slice(), &key.0].concat(),
        );
        let key_id = hash.as_ref()[..4].iter().map(|byte| format!("{byte:02x}")).collect();
        // A 32-byte key is always valid for ChaCha20-Poly1305.
        let unbound =
            UnboundKey::new(&CHACHA20_POLY1305, &key.0).unwrap_or_else(|_| unreachable!("32-byte key"));
        TokenCipher { key: LessSafeKey::new(unbound), key_id }
    }

    /// Seals bytes, binding them to `context` (which opening must repeat).
    pub fn seal(&self, plaintext: &[u8], context: &[u8]) -> Result<String, CipherError> {
        let nonce = random_bytes::<NONCE_LEN>().map_err(|_| CipherError::Random)?;
        let mut sealed = plaintext.to_vec();
        self.key
            .seal_in_place_append_tag(Nonce::assume_unique_for_key(nonce), Aad::from(context), &mut sealed)
            .map_err(|_| CipherError::Encode)?;
        let mut payload = nonce.to_vec();
        payload.append(&mut sealed);
        Ok(format!("{VERSION}.{}.{}", self.key_id, URL_SAFE_NO_PAD.encode(payload)))
    }

    /// Opens what [`seal`](Self::seal) made with the same key and context.
    pub fn open(&self, sealed: &str, context: &[u8]) -> Result<Vec<u8>, CipherError> {
        if sealed.len() > MAX_SEALED_CHARS {
            return Err(CipherError::Malformed);
        }
        let mut parts = sealed.trim().splitn(3, '.');
        let (Some(VERSION), Some(key_id), Some(payload)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(CipherError::Malformed);
        };
        if key_id != self.key_id {
            return Err(CipherError::WrongKey);
        }
        let mut payload = URL_SAFE_NO_PAD.decode(payload).map_err(|_| CipherError::Malformed)?;
        if payload.len() < NONCE_LEN + CHACHA20_POLY1305.tag_len() {
            return Err(CipherError::Malformed);
        }
        let mut nonce = [0; NONCE_LEN];
        nonce.copy_from_slice(&payload[..NONCE_LEN]);
        let plaintext = self
            .key
            .open_in_place(Nonce::assume_unique_for_key(nonce), Aad::from(context), &mut payload[NONCE_LEN..])
            .map_err(|_| CipherError::Tampered)?;
        Ok(plaintext.to_vec())
    }

    /// Seals a value as JSON, e.g. a [`TokenSet`](super::TokenSet) or
    /// [`ClientCredentials`](super::ClientCredentials).
    pub fn seal_json<T: Serialize>(&self, value: &T, context: &[u8]) -> Result<String, CipherError> {
        let json = serde_json::to_vec(value).map_err(|_| CipherError::Encode)?;
        self.seal(&json, context)
    }

    /// Opens a value sealed with [`seal_json`](Self::seal_json).
    pub fn open_json<T: DeserializeOwned>(&self, sealed: &str, context: &[u8]) -> Result<T, CipherError> {
        serde_json::from_slice(&self.open(sealed, context)?).map_err(|_| CipherError::Decode)
    }
}

impl fmt::Debug for TokenCipher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenCipher").field("key_id", &self.key_id).finish()
    }
}
