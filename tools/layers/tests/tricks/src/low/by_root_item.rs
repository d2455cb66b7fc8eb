pub fn f() {
    crate::root_helper();
}
