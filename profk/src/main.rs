fn main() {
    println!("profk");
}
