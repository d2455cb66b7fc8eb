pub fn thing() {}
