//! File checksums: sha256 (the pin for every model file) and the hub's git blob id.

use std::fs::File;
use std::io::Read;
use std::path::Path;

use sha1::Sha1;
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

const BUF: usize = 4 << 20;

fn digest_file<D: Digest>(path: &Path, mut hasher: D) -> Result<String> {
    let mut f = File::open(path).map_err(Error::path(path))?;
    let mut buf = vec![0u8; BUF];
    loop {
        let n = f.read(&mut buf).map_err(Error::path(path))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hex::encode(hasher.finalize()))
}

/// Hex sha256 of a file, streamed.
pub fn sha256_file(path: &Path) -> Result<String> {
    digest_file(path, Sha256::new())
}

/// Git's blob id of a file (`git hash-object`): sha1 over `blob <len>\0` and the bytes.
pub fn git_blob_sha1_file(path: &Path) -> Result<String> {
    let len = std::fs::metadata(path).map_err(Error::path(path))?.len();
    let mut h = Sha1::new();
    h.update(format!("blob {len}\0").as_bytes());
    digest_file(path, h)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_digests() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("hello");
        std::fs::write(&p, b"hello\n").unwrap();
        assert_eq!(
            sha256_file(&p).unwrap(),
            "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03"
        );
        // `printf 'hello\n' | git hash-object --stdin`
        assert_eq!(git_blob_sha1_file(&p).unwrap(), "ce013625030ba8dba906f756967f9e9ca394464a");
    }
}
