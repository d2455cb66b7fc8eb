use super::super::{self as root};

pub fn f() {
    root::high::g();
}
