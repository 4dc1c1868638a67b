//! Writing a blob file: the header record, then one record per value.

use super::{
    next_record_start, payload_position, BlobFileMeta, BlobRef, FORMAT_VERSION, KIND_SEPARATED,
    MAGIC, RECORD_VALUE,
};
use crate::coding::{crc32, put_u32, put_varint};
use crate::fs::WritableFile;
use crate::log::LogWriter;
use crate::Result;

/// Appends values to a new blob file, each returning the reference a table stores. After
/// an error the file is not a blob file: drop the writer and remove it.
#[derive(Debug)]
pub struct BlobWriter {
    log: LogWriter,
    meta: BlobFileMeta,
    record: Vec<u8>,
}

impl BlobWriter {
    /// Starts blob file `number` in `file` (which should be empty) with its header record.
    pub fn new(file: Box<dyn WritableFile>, number: u64) -> Result<BlobWriter> {
        let mut log = LogWriter::new(file);
        let mut header = Vec::with_capacity(super::HEADER_LEN);
        header.extend_from_slice(&MAGIC);
        put_u32(&mut header, FORMAT_VERSION);
        header.push(KIND_SEPARATED);
        header.extend_from_slice(&number.to_le_bytes());
        log.add_record(&header)?;
        let meta = BlobFileMeta { number, ..BlobFileMeta::default() };
        Ok(BlobWriter { log, meta, record: Vec::new() })
    }

    /// Appends `value`, written under `key`, and returns its reference.
    pub fn add(&mut self, key: &[u8], value: &[u8]) -> Result<BlobRef> {
        self.record.clear();
        self.record.push(RECORD_VALUE);
        put_varint(&mut self.record, key.len() as u64);
        self.record.extend_from_slice(key);
        let at = self.record.len() as u64;
        let start = next_record_start(self.log.len());
        // The value is written from where it lies: never copied, whatever its size.
        self.log.add_record_parts(&self.record, value)?;
        self.meta.values += 1;
        self.meta.value_bytes += value.len() as u64;
        Ok(BlobRef {
            file: self.meta.number,
            offset: payload_position(start, at),
            len: value.len() as u64,
            crc: crc32(&[value]),
        })
    }

    /// The file's number.
    pub fn number(&self) -> u64 {
        self.meta.number
    }

    /// Values added so far.
    pub fn values(&self) -> u64 {
        self.meta.values
    }

    /// Bytes written so far.
    pub fn len(&self) -> u64 {
        self.log.len()
    }

    /// True before anything was written (never: the header is written at once).
    pub fn is_empty(&self) -> bool {
        self.log.is_empty()
    }

    /// Syncs the file and returns what the manifest records of it.
    pub fn finish(mut self) -> Result<BlobFileMeta> {
        self.log.sync()?;
        self.meta.file_size = self.log.len();
        Ok(self.meta)
    }
}
