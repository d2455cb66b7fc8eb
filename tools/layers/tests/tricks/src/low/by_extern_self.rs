pub fn f() {
    me::high::g();
}
