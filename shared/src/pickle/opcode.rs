//! The pickle opcodes, by the names CPython's `pickletools` gives them, so a
//! reader of the machine can find `BININT` by name rather than as `b'J'`.
//! Grouped by the protocol that introduced them.

// Protocol 0 and 1.
/// Push a mark: the start of a run of items for LIST, DICT, TUPLE, APPENDS…
pub const MARK: u8 = b'(';
/// End of the pickle: the top of the stack is the result.
pub const STOP: u8 = b'.';
/// Discard the top of the stack.
pub const POP: u8 = b'0';
/// Discard everything down to and including the last mark.
pub const POP_MARK: u8 = b'1';
/// Push the top of the stack again.
pub const DUP: u8 = b'2';
/// A float written as text, up to a newline.
pub const FLOAT: u8 = b'F';
/// An integer written as text; `01` and `00` are True and False.
pub const INT: u8 = b'I';
/// A four-byte little-endian signed integer.
pub const BININT: u8 = b'J';
/// A one-byte unsigned integer.
pub const BININT1: u8 = b'K';
/// A long integer written as text, with an optional `L`.
pub const LONG: u8 = b'L';
/// A two-byte little-endian unsigned integer.
pub const BININT2: u8 = b'M';
/// Push None.
pub const NONE: u8 = b'N';
/// A persistent id as text (refused: it calls back into Python).
pub const PERSID: u8 = b'P';
/// A persistent id from the stack (refused).
pub const BINPERSID: u8 = b'Q';
/// Call a callable with arguments (refused).
pub const REDUCE: u8 = b'R';
/// A quoted protocol 0 string (not supported).
pub const STRING: u8 = b'S';
/// A byte string with a four-byte signed length, read as Latin-1.
pub const BINSTRING: u8 = b'T';
/// A byte string with a one-byte length, read as Latin-1.
pub const SHORT_BINSTRING: u8 = b'U';
/// A raw-unicode-escaped protocol 0 string (not supported).
pub const UNICODE: u8 = b'V';
/// A UTF-8 string with a four-byte length.
pub const BINUNICODE: u8 = b'X';
/// Append the top of the stack to the list below it.
pub const APPEND: u8 = b'a';
/// Call `__setstate__` (refused).
pub const BUILD: u8 = b'b';
/// Import a module attribute (refused).
pub const GLOBAL: u8 = b'c';
/// Build a dict from the pairs above the last mark.
pub const DICT: u8 = b'd';
/// Push an empty dict.
pub const EMPTY_DICT: u8 = b'}';
/// Append the items above the last mark to the list below it.
pub const APPENDS: u8 = b'e';
/// Push a memo slot named by a decimal line.
pub const GET: u8 = b'g';
/// Push a memo slot named by one byte.
pub const BINGET: u8 = b'h';
/// Build a class instance (refused).
pub const INST: u8 = b'i';
/// Push a memo slot named by four bytes.
pub const LONG_BINGET: u8 = b'j';
/// Build a list from the items above the last mark.
pub const LIST: u8 = b'l';
/// Push an empty list.
pub const EMPTY_LIST: u8 = b']';
/// Build an object (refused).
pub const OBJ: u8 = b'o';
/// Store the top of the stack in a memo slot named by a decimal line.
pub const PUT: u8 = b'p';
/// Store the top of the stack in a memo slot named by one byte.
pub const BINPUT: u8 = b'q';
/// Store the top of the stack in a memo slot named by four bytes.
pub const LONG_BINPUT: u8 = b'r';
/// Set one key to a value in the dict below them.
pub const SETITEM: u8 = b's';
/// Build a tuple from the items above the last mark.
pub const TUPLE: u8 = b't';
/// Push an empty tuple.
pub const EMPTY_TUPLE: u8 = b')';
/// Set the pairs above the last mark in the dict below it.
pub const SETITEMS: u8 = b'u';
/// An eight-byte big-endian float.
pub const BINFLOAT: u8 = b'G';

// Protocol 2.
/// The protocol number, first in the stream.
pub const PROTO: u8 = 0x80;
/// `cls.__new__(cls, *args)` (refused).
pub const NEWOBJ: u8 = 0x81;
/// An extension registry code of one byte (refused).
pub const EXT1: u8 = 0x82;
/// An extension registry code of two bytes (refused).
pub const EXT2: u8 = 0x83;
/// An extension registry code of four bytes (refused).
pub const EXT4: u8 = 0x84;
/// Build a tuple of the top item.
pub const TUPLE1: u8 = 0x85;
/// Build a tuple of the top two items.
pub const TUPLE2: u8 = 0x86;
/// Build a tuple of the top three items.
pub const TUPLE3: u8 = 0x87;
/// Push True.
pub const NEWTRUE: u8 = 0x88;
/// Push False.
pub const NEWFALSE: u8 = 0x89;
/// A little-endian two's-complement integer with a one-byte length.
pub const LONG1: u8 = 0x8a;
/// A little-endian two's-complement integer with a four-byte length.
pub const LONG4: u8 = 0x8b;

// Protocol 3.
/// Bytes with a four-byte length.
pub const BINBYTES: u8 = b'B';
/// Bytes with a one-byte length.
pub const SHORT_BINBYTES: u8 = b'C';

// Protocol 4.
/// A UTF-8 string with a one-byte length.
pub const SHORT_BINUNICODE: u8 = 0x8c;
/// A UTF-8 string with an eight-byte length.
pub const BINUNICODE8: u8 = 0x8d;
/// Bytes with an eight-byte length.
pub const BINBYTES8: u8 = 0x8e;
/// Push an empty set.
pub const EMPTY_SET: u8 = 0x8f;
/// Add the items above the last mark to the set below it.
pub const ADDITEMS: u8 = 0x90;
/// Build a frozenset from the items above the last mark.
pub const FROZENSET: u8 = 0x91;
/// `cls.__new__(cls, *args, **kwargs)` (refused).
pub const NEWOBJ_EX: u8 = 0x92;
/// Import a module attribute named on the stack (refused).
pub const STACK_GLOBAL: u8 = 0x93;
/// Store the top of the stack in the next memo slot.
pub const MEMOIZE: u8 = 0x94;
/// A length hint for buffered readers: the next frame's size.
pub const FRAME: u8 = 0x95;

// Protocol 5.
/// A bytearray with an eight-byte length.
pub const BYTEARRAY8: u8 = 0x96;
/// An out-of-band buffer (never in snapshots).
pub const NEXT_BUFFER: u8 = 0x97;
/// Make the top buffer read-only (never in snapshots).
pub const READONLY_BUFFER: u8 = 0x98;

/// The name of an opcode that imports or calls Python, which the machine
/// refuses; `None` for every other byte.
pub fn forbidden(opcode: u8) -> Option<&'static str> {
    Some(match opcode {
        GLOBAL => "GLOBAL",
        STACK_GLOBAL => "STACK_GLOBAL",
        REDUCE => "REDUCE",
        BUILD => "BUILD",
        INST => "INST",
        OBJ => "OBJ",
        NEWOBJ => "NEWOBJ",
        NEWOBJ_EX => "NEWOBJ_EX",
        PERSID => "PERSID",
        BINPERSID => "BINPERSID",
        EXT1 => "EXT1",
        EXT2 => "EXT2",
        EXT4 => "EXT4",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_refused_opcode_has_its_name_and_no_other_does() {
        let named: Vec<u8> = (0..=255u8).filter(|&b| forbidden(b).is_some()).collect();
        assert_eq!(named.len(), 13, "{named:?}");
        assert_eq!(forbidden(GLOBAL), Some("GLOBAL"));
        assert_eq!(forbidden(BININT), None);
    }
}
