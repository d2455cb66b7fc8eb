//! [`Column`]: an immutable array of plain numbers, either built in memory
//! or viewing the bytes of a persisted index file (read into memory, or
//! mapped by the server), without copying them.
//!
//! Why not `Vec<T>`: a server that opens a 16M-entry snapshot from its
//! index file must not copy a gigabyte of columns to answer one timeline
//! window, and two structures that hold the same column (the trace's times
//! and the timeline's axis) must share it. `bytemuck` does the casts, so
//! this crate stays free of `unsafe`.

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use bytemuck::Pod;
use bytes::Bytes;

/// An immutable array of `T`, cheap to clone (clones share the data).
pub struct Column<T: Pod>(Repr<T>);

enum Repr<T> {
    /// Built in memory.
    Heap(Arc<Vec<T>>),
    /// Viewing bytes that hold `T`s, little-endian, suitably aligned
    /// (checked once, when made).
    Bytes(Bytes),
}

/// Why bytes could not be viewed as a column.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ColumnError {
    /// The length is not a whole number of elements.
    #[error("{len} bytes is not a whole number of {size}-byte elements")]
    Length {
        /// Bytes given.
        len: usize,
        /// Bytes per element.
        size: usize,
    },
    /// Index files hold little-endian numbers; this machine is big-endian.
    #[error("index files are little-endian and this machine is not")]
    BigEndian,
}

impl<T: Pod> Column<T> {
    /// View `bytes` as `T`s without copying them, or copy them when they
    /// are not aligned for `T` (a buffer the caller could not align).
    pub fn from_bytes(bytes: Bytes) -> Result<Column<T>, ColumnError> {
        if cfg!(target_endian = "big") {
            return Err(ColumnError::BigEndian);
        }
        let size = size_of::<T>();
        if size == 0 || !bytes.len().is_multiple_of(size) {
            return Err(ColumnError::Length { len: bytes.len(), size });
        }
        if bytemuck::try_cast_slice::<u8, T>(&bytes).is_ok() {
            Ok(Column(Repr::Bytes(bytes)))
        } else {
            Ok(Column::from(bytemuck::pod_collect_to_vec::<u8, T>(&bytes)))
        }
    }

    /// The elements.
    #[inline]
    pub fn as_slice(&self) -> &[T] {
        match &self.0 {
            Repr::Heap(v) => v,
            // Length and alignment were checked when the column was made.
            Repr::Bytes(b) => bytemuck::try_cast_slice(b).unwrap_or_default(),
        }
    }

    /// The elements as raw little-endian bytes, for writing.
    pub fn as_bytes(&self) -> &[u8] {
        bytemuck::cast_slice(self.as_slice())
    }

    /// Bytes this column holds on the heap (0 for a view of an index
    /// file, whose pages the operating system keeps and evicts).
    pub fn heap_bytes(&self) -> usize {
        match &self.0 {
            Repr::Heap(v) => v.capacity() * size_of::<T>(),
            Repr::Bytes(_) => 0,
        }
    }

    /// Whether this column views the same data as `other` (a clone of it).
    pub fn shares(&self, other: &Column<T>) -> bool {
        match (&self.0, &other.0) {
            (Repr::Heap(a), Repr::Heap(b)) => Arc::ptr_eq(a, b),
            (Repr::Bytes(a), Repr::Bytes(b)) => a.as_ptr() == b.as_ptr() && a.len() == b.len(),
            _ => false,
        }
    }
}

impl<T: Pod> Deref for Column<T> {
    type Target = [T];

    #[inline]
    fn deref(&self) -> &[T] {
        self.as_slice()
    }
}

impl<T: Pod> From<Vec<T>> for Column<T> {
    /// Takes the vector, giving back its unused capacity: a column built
    /// by pushing keeps up to half its buffer empty (100 MB of a 16M-entry
    /// trace's intervals), and a column is never pushed to again.
    fn from(mut v: Vec<T>) -> Column<T> {
        v.shrink_to_fit();
        Column(Repr::Heap(Arc::new(v)))
    }
}

impl<T: Pod> FromIterator<T> for Column<T> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Column<T> {
        Column::from(iter.into_iter().collect::<Vec<T>>())
    }
}

impl<T: Pod> Default for Column<T> {
    fn default() -> Column<T> {
        Column::from(Vec::new())
    }
}

impl<T: Pod> Clone for Column<T> {
    fn clone(&self) -> Column<T> {
        Column(match &self.0 {
            Repr::Heap(v) => Repr::Heap(Arc::clone(v)),
            Repr::Bytes(b) => Repr::Bytes(b.clone()),
        })
    }
}

impl<T: Pod + fmt::Debug> fmt::Debug for Column<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = if matches!(self.0, Repr::Heap(_)) { "heap" } else { "bytes" };
        write!(f, "Column<{}>({kind}, {} elements)", std::any::type_name::<T>(), self.len())
    }
}

impl<T: Pod + PartialEq> PartialEq for Column<T> {
    fn eq(&self, other: &Column<T>) -> bool {
        self.as_slice() == other.as_slice()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_column_views_aligned_bytes_and_copies_misaligned_ones() {
        let values: Vec<u64> = vec![1, 2, u64::MAX];
        let bytes = Bytes::copy_from_slice(bytemuck::cast_slice(&values));
        let col = Column::<u64>::from_bytes(bytes.clone()).expect("whole elements");
        assert_eq!(&*col, &values[..]);
        // One byte in: misaligned for u64 (or aligned by chance on no
        // allocator we know); either way the values read the same.
        let mut shifted = vec![0u8];
        shifted.extend_from_slice(&bytes);
        let col = Column::<u64>::from_bytes(Bytes::from(shifted).slice(1..)).expect("whole elements");
        assert_eq!(&*col, &values[..]);
        assert_eq!(
            Column::<u64>::from_bytes(Bytes::from_static(&[0; 12])).map(|c| c.len()),
            Err(ColumnError::Length { len: 12, size: 8 })
        );
    }

    #[test]
    fn clones_share_and_heap_bytes_counts_only_the_heap() {
        let a: Column<u32> = (0..100).collect();
        let b = a.clone();
        assert!(a.shares(&b));
        assert!(a.heap_bytes() >= 400);
        let c = Column::<u32>::from_bytes(Bytes::copy_from_slice(a.as_bytes())).expect("whole elements");
        assert_eq!(a, c);
        assert!(!a.shares(&c));
    }
}
