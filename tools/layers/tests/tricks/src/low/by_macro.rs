pub fn f() {
    shout!();
    crate::exported!();
}
