//! Where readers of bodies (`body_read.rs`, `read_ahead.rs`) find a page
//! by its slot: sled, for a single server with `-b`, or a cluster node's
//! copy of its stream's pages (`cluster/page_copy.rs`), a room for each
//! slot in one file.

use std::io;
use std::sync::{Arc, Mutex};

use bytes::Bytes;

use super::body_cache::PageKey;
use super::page::page_key;
use super::slots::Slot;

/// A page's bytes as its source gives them (sled's shared buffer, or a
/// file's contents).
pub enum PageValue {
    Sled(::sled::IVec),
    Owned(Vec<u8>),
}

impl AsRef<[u8]> for PageValue {
    fn as_ref(&self) -> &[u8] {
        match self {
            PageValue::Sled(value) => value,
            PageValue::Owned(value) => value,
        }
    }
}

impl PageValue {
    /// The page as bytes the body cache can hold slices of, and the key it
    /// charges the page under: sled's buffer is the one its cached node
    /// holds, shared, not copied; a file's is charged its whole allocation.
    pub fn shared(self) -> (Bytes, PageKey) {
        let (page, charge) = match self {
            PageValue::Sled(value) => {
                let len = value.len();
                (Bytes::from_owner(value), len)
            }
            PageValue::Owned(value) => {
                let capacity = value.capacity();
                (Bytes::from(value), capacity)
            }
        };
        let key = PageKey::new(&page, charge);
        (page, key)
    }
}

impl From<Vec<u8>> for PageValue {
    fn from(value: Vec<u8>) -> PageValue {
        PageValue::Owned(value)
    }
}

/// Pages by slot. Reads block: callers are on threads of their own.
pub trait PageSource: Send + Sync {
    /// The page in `slot`; `None` if the slot is empty.
    fn page(&self, slot: Slot) -> io::Result<Option<PageValue>>;
}

impl PageSource for ::sled::Db {
    fn page(&self, slot: Slot) -> io::Result<Option<PageValue>> {
        Ok(self.get(page_key(slot))?.map(PageValue::Sled))
    }
}

/// A source until the store closes (`Bodies::close`): a sled handle kept
/// past then would keep sled's files locked after the absorber let go of
/// its own.
pub type Source = Arc<Mutex<Option<Arc<dyn PageSource>>>>;
