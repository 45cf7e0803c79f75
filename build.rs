//! Sets the `Py_3_x` cfgs of the interpreter the extension is built for.
fn main() {
    pyo3_build_config::use_pyo3_cfgs();
}
