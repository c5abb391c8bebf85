//! Session files: a row per file in `session_files` and its bytes in 256 KiB chunks in
//! `session_file_chunks`, written in one transaction so a file is never seen half stored.

use sqlx::{Connection, PgConnection};
use teamster_store::codec;
use teamster_store::{Error, Result, SessionFile};
use teamster_store_sql::error;

/// The bytes of a file per row of `session_file_chunks`.
const FILE_CHUNK_BYTES: usize = 256 * 1024;

/// Stores a file of an existing session; storing one already there changes nothing.
pub(crate) async fn put_file(connection: &mut PgConnection, file: &SessionFile) -> Result<()> {
    // Dropping the transaction without committing rolls it back (sqlx sends the `ROLLBACK`
    // ahead of the connection's next statement).
    let mut transaction = connection.begin().await.map_err(error::backend)?;
    let (stored, session_exists): (bool, bool) = sqlx::query_as(
        "WITH stored AS ( \
             INSERT INTO session_files (session_id, digest, media_type, size, created_at) \
             SELECT id, $2, $3, $4, $5 FROM sessions WHERE id = $1 \
             ON CONFLICT (session_id, digest) DO NOTHING \
             RETURNING 1 \
         ) \
         SELECT EXISTS (SELECT 1 FROM stored), EXISTS (SELECT 1 FROM sessions WHERE id = $1)",
    )
    .bind(&file.session_id)
    .bind(&file.digest)
    .bind(&file.media_type)
    .bind(codec::to_i64(file.data.len() as u64, "a file's size")?)
    .bind(&file.created_at)
    .fetch_one(&mut *transaction)
    .await
    .map_err(error::backend)?;
    if !session_exists {
        return Err(Error::NotFound("session"));
    }
    if stored {
        for (index, chunk) in file.data.chunks(FILE_CHUNK_BYTES).enumerate() {
            sqlx::query("INSERT INTO session_file_chunks (session_id, digest, chunk, data) VALUES ($1, $2, $3, $4)")
                .bind(&file.session_id)
                .bind(&file.digest)
                .bind(i32::try_from(index).map_err(|_| Error::Corrupt("a file has too many chunks".to_owned()))?)
                .bind(chunk)
                .execute(&mut *transaction)
                .await
                .map_err(error::backend)?;
        }
    }
    transaction.commit().await.map_err(error::backend)
}

/// A stored file with all its bytes.
pub(crate) async fn get_file(connection: &mut PgConnection, session_id: &str, digest: &str) -> Result<SessionFile> {
    let row: Option<(String, i64, String)> =
        sqlx::query_as("SELECT media_type, size, created_at FROM session_files WHERE session_id = $1 AND digest = $2")
            .bind(session_id)
            .bind(digest)
            .fetch_optional(&mut *connection)
            .await
            .map_err(error::backend)?;
    let (media_type, size, created_at) = row.ok_or(Error::NotFound("file"))?;
    let chunks: Vec<(Vec<u8>,)> =
        sqlx::query_as("SELECT data FROM session_file_chunks WHERE session_id = $1 AND digest = $2 ORDER BY chunk")
            .bind(session_id)
            .bind(digest)
            .fetch_all(connection)
            .await
            .map_err(error::backend)?;
    let mut data = Vec::with_capacity(usize::try_from(size).unwrap_or_default());
    for (chunk,) in chunks {
        data.extend_from_slice(&chunk);
    }
    if data.len() as i64 != size {
        return Err(Error::Corrupt(format!("file {digest:?} has {} of its {size} bytes", data.len())));
    }
    Ok(SessionFile { session_id: session_id.to_owned(), digest: digest.to_owned(), media_type, data, created_at })
}
