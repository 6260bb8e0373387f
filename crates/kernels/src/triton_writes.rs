//! Which pointer parameters a Triton kernel may write, read from the body
//! of its Triton IR function (`<name>.ttir` in Triton's cache), so that
//! its inputs are captured as inputs and only its outputs are compared
//! after the kernel. Triton marks no pointer `const`; its IR says what is
//! stored through.
//!
//! Each parameter is followed through the function: an operation's
//! results carry every parameter its operands carry, except a load's,
//! whose result is the memory's data rather than an address; `scf.for`
//! iteration arguments, the results of `scf.for`, `scf.if` and
//! `scf.while`, and `scf.while`'s arguments in both of its regions carry
//! what is yielded or passed on to them, position by position, to a fixed
//! point. A parameter is written when it reaches any operand of a store,
//! an atomic or a descriptor store (as the address, or as a stored value:
//! the pointer escapes). Anything this does not model makes every pointer
//! count as written: calls, integer-to-pointer casts, pointers to
//! pointers, inline assembly, regions it does not know, unstructured
//! control flow, more than 64 parameters; and so does an input past what
//! it follows: regions nested deeper than 256, a body of more than
//! 500,000 lines, values that do not settle in 64 passes. Each pass takes
//! steps in proportion to its lines (a name is found in one step, however
//! deep the regions nest), so the whole is linear in the input.
//!
//! Owns that analysis; never reads the cache (`triton` does).

use std::collections::HashMap;

/// [`analyse`], `None` where it gives up.
#[cfg(test)]
fn written_params(ir: &str, name: &str) -> Option<Vec<bool>> {
    analyse(ir, name).ok()
}

/// For each parameter of `tt.func public @<name>(…)` in `ir`, in order,
/// whether the function may write through it (never for a scalar, which
/// may still reach a store as a value or a mask). An error saying why
/// when the function is not there, its body holds something the analysis
/// does not model, or its input is past what the analysis follows
/// ([`MOST_NESTED_REGIONS`], [`MOST_BODY_LINES`], [`MOST_PASSES`]): then
/// every pointer must count as written.
pub fn analyse(ir: &str, name: &str) -> Result<Vec<bool>, String> {
    analyse_counting(ir, name).0
}

/// [`analyse`], and the steps it took (lines walked and names looked up).
fn analyse_counting(ir: &str, name: &str) -> (Result<Vec<bool>, String>, u64) {
    let (params, body) = match function(ir, name) {
        Ok(found) => found,
        Err(reason) => return (Err(reason), 0),
    };
    if params.len() > 64 {
        return (Err("it takes more than 64 parameters".into()), 0);
    }
    let Some(lines) = body
        .iter()
        .map(|l| Line::parse(l))
        .collect::<Option<Vec<_>>>()
    else {
        return (Err(UNMODELLED.into()), 0);
    };
    let mut flow = Flow::default();
    let result = settle(&params, &lines, &mut flow);
    (result, flow.steps)
}

const UNMODELLED: &str = "its Triton IR holds what the analysis does not model (a call, an \
                          integer cast to a pointer, a pointer to pointers, inline assembly, \
                          unstructured control flow or a region it does not know)";

/// The deepest nesting of regions followed.
pub const MOST_NESTED_REGIONS: usize = 256;
/// The most lines of a function's body followed.
pub const MOST_BODY_LINES: usize = 500_000;
/// The most passes over the body: values carried back by loops settle in
/// a few (each pass only adds parameters to values).
pub const MOST_PASSES: usize = 64;

/// Passes over `lines` until one adds nothing: which of `params` are
/// written. Each pass takes steps in proportion to the lines and the
/// names they use.
fn settle<'l>(
    params: &Params<'l>,
    lines: &'l [Line<'l>],
    flow: &mut Flow<'l>,
) -> Result<Vec<bool>, String> {
    for (i, (p, _)) in params.iter().enumerate() {
        flow.add((0, p), 1u64 << i);
    }
    for _ in 0..MOST_PASSES {
        flow.changed = false;
        flow.start_pass(params);
        pass(lines, flow).ok_or(UNMODELLED)?;
        if !flow.changed {
            return Ok(params
                .iter()
                .enumerate()
                .map(|(i, (_, pointer))| *pointer && flow.written & (1 << i) != 0)
                .collect());
        }
    }
    Err(format!(
        "what its values carry did not settle in {MOST_PASSES} passes"
    ))
}

/// A function's parameters: each one's name, and whether it is a pointer.
type Params<'a> = Vec<(&'a str, bool)>;

/// The parameters of the function `name` and its body: the lines after
/// its `tt.func` line up to the brace that closes it; else why not.
fn function<'a>(ir: &'a str, name: &str) -> Result<(Params<'a>, Vec<&'a str>), String> {
    let head = format!("@{name}(");
    let mut lines = ir.lines();
    let missing = || format!("its Triton IR has no function @{name} the analysis reads");
    let line = lines
        .find(|l| l.contains("tt.func") && l.contains(&head))
        .ok_or_else(missing)?;
    let params = crate::triton_ir::param_list(line, &head)
        .and_then(|list| {
            list.into_iter()
                .map(|part| {
                    let (name, ty) = part.split_once(':')?;
                    Some((name.trim(), ty.trim_start().starts_with("!tt.ptr<")))
                })
                .collect::<Option<Vec<_>>>()
        })
        .ok_or_else(missing)?;
    let mut depth = brace_change(line);
    if depth != 1 {
        return Err(missing());
    }
    let mut body = Vec::new();
    for line in lines {
        depth += brace_change(line);
        if depth <= 0 {
            return Ok((params, body));
        }
        // Depth 1 is the body; each region nested in it one more.
        if depth as usize > MOST_NESTED_REGIONS + 1 {
            return Err(format!(
                "its regions nest deeper than {MOST_NESTED_REGIONS}"
            ));
        }
        if body.len() == MOST_BODY_LINES {
            return Err(format!(
                "its function's body is longer than {MOST_BODY_LINES} lines"
            ));
        }
        body.push(line);
    }
    Err(missing())
}

/// The braces a line opens minus those it closes, outside quoted strings.
fn brace_change(line: &str) -> i32 {
    let mut quoted = false;
    let mut change = 0;
    for c in line.chars() {
        match c {
            '"' => quoted = !quoted,
            '{' if !quoted => change += 1,
            '}' if !quoted => change -= 1,
            _ => {}
        }
    }
    change
}

/// What one body line does, as far as the analysis cares.
#[derive(Debug)]
enum Step<'a> {
    /// Results carry what the operands carry.
    Compute,
    /// A load: the results are data and carry nothing.
    Load,
    /// A store, an atomic or a descriptor store: the operands are written.
    Store,
    /// `scf.for` opening its body: the induction variable and its bounds
    /// (`%i = %lb to %ub step %s`), then `(iteration argument, initial
    /// value)` pairs.
    For {
        bounds: Vec<&'a str>,
        iter_args: Vec<(&'a str, &'a str)>,
    },
    /// `scf.if` opening its `then` region.
    If,
    /// `scf.while (%a = %x, …)` opening its `before` region:
    /// `(argument, initial value)` pairs.
    While { args: Vec<(&'a str, &'a str)> },
    /// `scf.condition(%c) %v, …`: ends `before`, passing the values on to
    /// the `do` region's arguments and the loop's results.
    Condition,
    /// A region over data (`tt.reduce`, `tt.scan`): results carry what
    /// the operands carry; its own yields are ignored.
    DataRegion,
    /// `} else {` or `} do {`: the same op, its other region.
    Else,
    /// The end of a region.
    Close,
    /// `scf.yield` and friends: values for the enclosing region's results.
    Yield,
    /// A block label (`^bb0(…):`): the arguments of a data region's block,
    /// or of `scf.while`'s `do` region.
    Label,
}

/// One parsed body line.
#[derive(Debug)]
struct Line<'a> {
    results: Vec<String>,
    operands: Vec<&'a str>,
    step: Step<'a>,
}

impl<'a> Line<'a> {
    /// `None` for a line the analysis does not model.
    fn parse(line: &'a str) -> Option<Line<'a>> {
        let text = without_location(line.trim());
        let (results, rest) = match text.strip_prefix('%') {
            Some(_) => {
                let (lhs, rest) = text.split_once(" = ")?;
                (result_names(lhs)?, rest.trim_start())
            }
            None => (Vec::new(), text),
        };
        let op = rest
            .split(|c: char| c.is_whitespace() || c == '(' || c == '<')
            .next()
            .unwrap_or_default()
            .trim_matches('"');
        let operands = value_names(rest);
        let change = brace_change(text);
        if text.contains("!tt.ptr<!tt.ptr") || integer_made_pointer(op, rest) {
            return None;
        }
        let step = match op {
            _ if text.starts_with('}') && change == 0 && text.ends_with('{') => Step::Else,
            _ if text.starts_with('}') && change == -1 => Step::Close,
            _ if text.starts_with('^') => Step::Label,
            "scf.for" if change == 1 => Step::For {
                bounds: value_names(&rest[..rest.find("iter_args(").unwrap_or(rest.len())]),
                iter_args: pairs_after(rest, "iter_args(")?,
            },
            "scf.if" if change == 1 => Step::If,
            "scf.while" if change == 1 => Step::While {
                args: pairs_after(rest, "scf.while (")?,
            },
            "tt.reduce" | "tt.scan" if change == 1 => Step::DataRegion,
            _ if change != 0 => return None,
            "scf.yield" | "tt.reduce.return" | "tt.scan.return" => Step::Yield,
            "scf.condition" => Step::Condition,
            "tt.call"
            | "tt.int_to_ptr"
            | "tt.elementwise_inline_asm"
            | "scf.execute_region"
            | "scf.index_switch" => return None,
            _ if op.starts_with("cf.") || op.starts_with("llvm.") => return None,
            "tt.load" | "tt.descriptor_load" | "tt.descriptor_gather" => Step::Load,
            _ if op.contains("store") || op.contains("atomic") || op.contains("scatter") => {
                Step::Store
            }
            "tt.descriptor_reduce" => Step::Store,
            _ => Step::Compute,
        };
        Some(Line {
            results,
            operands,
            step,
        })
    }
}

/// A bitcast whose result is a pointer made from what is not one: an
/// address the parameters do not tell.
fn integer_made_pointer(op: &str, rest: &str) -> bool {
    if !matches!(op, "tt.bitcast" | "arith.bitcast") {
        return false;
    }
    match rest.split_once(" -> ") {
        Some((from, to)) => to.contains("!tt.ptr") && !from.contains("!tt.ptr"),
        None => false,
    }
}

/// A line without its trailing `loc(…)`.
fn without_location(text: &str) -> &str {
    match text.rfind(" loc(") {
        Some(at) if text.ends_with(')') => text[..at].trim_end(),
        _ => text,
    }
}

/// The values a left-hand side defines: `%a`, `%a, %b`, or `%a:2` (read
/// as `%a#0`, `%a#1`).
fn result_names(lhs: &str) -> Option<Vec<String>> {
    let mut names = Vec::new();
    for part in lhs.split(',') {
        let part = part.trim();
        if !part.starts_with('%') {
            return None;
        }
        match part.split_once(':') {
            Some((name, count)) => {
                let count: usize = count.trim().parse().ok()?;
                names.extend((0..count).map(|k| format!("{name}#{k}")));
            }
            None => names.push(part.to_string()),
        }
    }
    Some(names)
}

/// Every value a text names (`%x`, `%12`, `%r#1`), outside quoted strings.
fn value_names(text: &str) -> Vec<&str> {
    let mut names = Vec::new();
    let mut quoted = false;
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => quoted = !quoted,
            b'%' if !quoted => {
                let start = i;
                i += 1;
                while i < bytes.len()
                    && (bytes[i].is_ascii_alphanumeric() || b"_$.-".contains(&bytes[i]))
                {
                    i += 1;
                }
                if i + 1 < bytes.len() && bytes[i] == b'#' && bytes[i + 1].is_ascii_digit() {
                    i += 1;
                    while i < bytes.len() && bytes[i].is_ascii_digit() {
                        i += 1;
                    }
                }
                names.push(&text[start..i]);
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    names
}

/// The `(%a = %x, %b = %y)` pairs after `opening` (`iter_args(` of
/// `scf.for`, `scf.while (`); empty without them.
fn pairs_after<'a>(rest: &'a str, opening: &str) -> Option<Vec<(&'a str, &'a str)>> {
    let Some(at) = rest.find(opening) else {
        return Some(Vec::new());
    };
    let list = &rest[at + opening.len()..];
    let list = &list[..list.find(')')?];
    list.split(',')
        .filter(|pair| !pair.trim().is_empty())
        .map(|pair| {
            let (arg, init) = pair.split_once('=')?;
            Some((arg.trim(), init.trim()))
        })
        .collect()
}

/// A value: the region that defines it (0 for the function's body, then
/// each region, an `else` included, numbered in the order the body opens
/// them) and its name. Sibling regions reuse names (`%2` in `then` and in
/// `else` are two values).
type Value<'l> = (usize, &'l str);

/// What each value carries (a bit per parameter), and the regions open at
/// the line a pass has reached.
#[derive(Default)]
struct Flow<'l> {
    carried: HashMap<Value<'l>, u64>,
    /// The open regions, innermost last, below them the body (0).
    scopes: Vec<usize>,
    /// For each name, the open regions (the body 0 included) that define
    /// it, innermost last: a name is found in one step, however deep.
    visible: HashMap<&'l str, Vec<usize>>,
    /// For the body and each open region, innermost last: the names it
    /// defined in this pass (hidden again when it closes).
    defined: Vec<Vec<&'l str>>,
    /// Regions opened so far in this pass.
    opened: usize,
    /// The parameters that reach a store.
    written: u64,
    /// Whether this pass added a parameter to a value or to `written`.
    changed: bool,
    /// Lines walked and names looked up, over all passes.
    steps: u64,
}

impl<'l> Flow<'l> {
    /// Before a pass: no region open, only the parameters defined.
    fn start_pass(&mut self, params: &Params<'l>) {
        self.scopes.clear();
        self.opened = 0;
        self.visible.clear();
        self.defined.clear();
        self.defined.push(Vec::new());
        for (p, _) in params {
            self.show(p);
        }
    }

    /// What `name` carries where the pass is: its definition in the
    /// innermost open region that has one.
    fn of_one(&mut self, name: &str) -> u64 {
        self.steps += 1;
        self.visible
            .get(name)
            .and_then(|regions| regions.last())
            .and_then(|&s| self.carried.get(&(s, name)))
            .copied()
            .unwrap_or(0)
    }

    fn of(&mut self, names: &[&str]) -> u64 {
        names.iter().fold(0, |acc, n| acc | self.of_one(n))
    }

    /// The innermost open region (0: the body).
    fn current(&self) -> usize {
        self.scopes.last().copied().unwrap_or(0)
    }

    /// Makes the innermost open region's `name` the one found.
    fn show(&mut self, name: &'l str) {
        let scope = self.current();
        let regions = self.visible.entry(name).or_default();
        if regions.last() != Some(&scope) {
            regions.push(scope);
            if let Some(names) = self.defined.last_mut() {
                names.push(name);
            }
        }
    }

    /// Defines `name` in the innermost open region, carrying `bits` too.
    fn define(&mut self, name: &'l str, bits: u64) -> Value<'l> {
        self.show(name);
        let value = (self.current(), name);
        self.add(value, bits);
        value
    }

    fn add(&mut self, value: Value<'l>, bits: u64) {
        let carried = self.carried.entry(value).or_default();
        self.changed |= bits & !*carried != 0;
        *carried |= bits;
    }

    /// The parameters `bits` reach a store.
    fn write(&mut self, bits: u64) {
        self.changed |= bits & !self.written != 0;
        self.written |= bits;
    }

    fn open(&mut self) {
        self.opened += 1;
        self.scopes.push(self.opened);
        self.defined.push(Vec::new());
    }

    /// Closes the innermost region: the names it defined are found
    /// outside it again.
    fn close(&mut self) -> Option<()> {
        self.scopes.pop()?;
        for name in self.defined.pop()? {
            if let Some(regions) = self.visible.get_mut(name) {
                regions.pop();
            }
        }
        Some(())
    }
}

/// One open region while a pass walks the body.
struct Region<'l> {
    /// The values its yields feed, position by position: the op's results,
    /// and for `scf.for` its iteration arguments too.
    fed: Vec<Vec<Value<'l>>>,
    /// A data region: its yields are ignored.
    data: bool,
    /// `scf.while`: what `scf.condition` passes on, position by position,
    /// once the pass has reached it (the `do` region's arguments take it).
    passed: Option<Vec<u64>>,
    /// `scf.while`'s results, which take what `scf.condition` passes on;
    /// `None` for other regions.
    exits: Option<Vec<Value<'l>>>,
}

/// One walk over the body: every value gains what flows into it.
fn pass<'l>(lines: &'l [Line<'l>], flow: &mut Flow<'l>) -> Option<()> {
    let mut regions: Vec<Region<'l>> = Vec::new();
    for line in lines {
        flow.steps += 1;
        let results: Vec<&str> = line.results.iter().map(String::as_str).collect();
        match &line.step {
            Step::Compute => {
                let from = flow.of(&line.operands);
                for r in results {
                    flow.define(r, from);
                }
            }
            Step::Load => {
                for r in results {
                    flow.define(r, 0);
                }
            }
            Step::Else => {
                flow.close()?;
                flow.open();
            }
            // Block labels belong to data regions and to `scf.while`'s
            // `do` region; elsewhere they are unstructured control flow.
            Step::Label => match regions.last() {
                Some(r) if r.data => {}
                Some(Region {
                    passed: Some(passed),
                    ..
                }) => {
                    if line.operands.len() != passed.len() {
                        return None;
                    }
                    let passed = passed.clone();
                    for (arg, bits) in line.operands.iter().zip(passed) {
                        flow.define(arg, bits);
                    }
                }
                _ => return None,
            },
            Step::Store => {
                let bits = flow.of(&line.operands);
                flow.write(bits);
                for r in results {
                    flow.define(r, 0);
                }
            }
            Step::For { bounds, iter_args } => {
                if results.len() != iter_args.len() {
                    return None;
                }
                // The induction variable carries what its bounds carry; an
                // iteration argument, and the result when the loop does not
                // run, start as the initial value.
                let from_bounds = flow.of(bounds.get(1..).unwrap_or_default());
                let inits: Vec<u64> = iter_args.iter().map(|(_, i)| flow.of_one(i)).collect();
                let outside: Vec<Value<'l>> = results
                    .iter()
                    .zip(&inits)
                    .map(|(r, &bits)| flow.define(r, bits))
                    .collect();
                flow.open();
                if let Some(iv) = bounds.first() {
                    flow.define(iv, from_bounds);
                }
                let fed = iter_args
                    .iter()
                    .zip(&inits)
                    .zip(outside)
                    .map(|(((arg, _), &bits), result)| vec![result, flow.define(arg, bits)])
                    .collect();
                regions.push(Region {
                    fed,
                    data: false,
                    passed: None,
                    exits: None,
                });
            }
            Step::If => {
                let fed = results.iter().map(|r| vec![flow.define(r, 0)]).collect();
                flow.open();
                regions.push(Region {
                    fed,
                    data: false,
                    passed: None,
                    exits: None,
                });
            }
            Step::While { args } => {
                // The results are defined outside; `before`'s arguments
                // start as the initial values and take what `do` yields.
                let inits: Vec<u64> = args.iter().map(|(_, i)| flow.of_one(i)).collect();
                let exits = Some(results.iter().map(|r| flow.define(r, 0)).collect());
                flow.open();
                let fed = args
                    .iter()
                    .zip(inits)
                    .map(|((arg, _), bits)| vec![flow.define(arg, bits)])
                    .collect();
                regions.push(Region {
                    fed,
                    data: false,
                    passed: None,
                    exits,
                });
            }
            Step::Condition => {
                // `scf.condition(%c) %v, …`: the values after the condition.
                let passed: Vec<u64> = line
                    .operands
                    .iter()
                    .skip(1)
                    .map(|v| flow.of_one(v))
                    .collect();
                let region = regions.last_mut()?;
                let exits = region.exits.as_ref()?;
                if exits.len() != passed.len() {
                    return None;
                }
                for (&exit, &bits) in exits.iter().zip(&passed) {
                    flow.add(exit, bits);
                }
                region.passed = Some(passed);
            }
            Step::DataRegion => {
                let from = flow.of(&line.operands);
                for r in results {
                    flow.define(r, from);
                }
                flow.open();
                regions.push(Region {
                    fed: Vec::new(),
                    data: true,
                    passed: None,
                    exits: None,
                });
            }
            Step::Close => {
                flow.close()?;
                // A while loop's `before` ends in `scf.condition`.
                let region = regions.pop()?;
                if region.exits.is_some() && region.passed.is_none() {
                    return None;
                }
            }
            Step::Yield => {
                let region = regions.last()?;
                if region.data {
                    continue;
                }
                // `scf.yield %a, %b : types`: the values before the types.
                let values: Vec<&str> = line
                    .operands
                    .iter()
                    .copied()
                    .take(region.fed.len())
                    .collect();
                if values.len() != region.fed.len() {
                    return None;
                }
                for (value, targets) in values.iter().zip(&region.fed) {
                    let from = flow.of_one(value);
                    for &t in targets {
                        flow.add(t, from);
                    }
                }
            }
        }
    }
    (regions.is_empty() && flow.scopes.is_empty()).then_some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Triton IR module around one function's body, as Triton 3.x
    /// prints it.
    fn module(name: &str, params: &str, body: &str) -> String {
        format!(
            "#loc = loc(\"/work/app.py\":6:0)\nmodule {{\n  tt.func public @{name}({params}) \
             attributes {{noinline = false}} {{\n{body}    tt.return loc(#loc15)\n  }} \
             loc(#loc)\n}} loc(#loc)\n#loc1 = loc(\"/work/app.py\":11:38)\n"
        )
    }

    /// `out = 2 * x + y`, masked, as Triton 3.6 lowers it.
    const SCALE_ADD_BODY: &str = r#"    %cst = arith.constant dense<2.000000e+00> : tensor<1024xf32> loc(#loc1)
    %c1024_i32 = arith.constant 1024 : i32 loc(#loc2)
    %offsets = tt.get_program_id x : i32 loc(#loc20)
    %offsets_0 = arith.muli %offsets, %c1024_i32 : i32 loc(#loc21)
    %offsets_1 = tt.make_range {end = 1024 : i32, start = 0 : i32} : tensor<1024xi32> loc(#loc22)
    %offsets_2 = tt.splat %offsets_0 : i32 -> tensor<1024xi32> loc(#loc23)
    %offsets_3 = arith.addi %offsets_2, %offsets_1 : tensor<1024xi32> loc(#loc23)
    %mask = tt.splat %n : i32 -> tensor<1024xi32> loc(#loc24)
    %mask_4 = arith.cmpi slt, %offsets_3, %mask : tensor<1024xi32> loc(#loc24)
    %x = tt.splat %x_ptr : !tt.ptr<f32> -> tensor<1024x!tt.ptr<f32>> loc(#loc25)
    %x_5 = tt.addptr %x, %offsets_3 : tensor<1024x!tt.ptr<f32>>, tensor<1024xi32> loc(#loc25)
    %x_6 = tt.load %x_5, %mask_4 : tensor<1024x!tt.ptr<f32>> loc(#loc26)
    %y = tt.splat %y_ptr : !tt.ptr<f32> -> tensor<1024x!tt.ptr<f32>> loc(#loc27)
    %y_7 = tt.addptr %y, %offsets_3 : tensor<1024x!tt.ptr<f32>>, tensor<1024xi32> loc(#loc27)
    %y_8 = tt.load %y_7, %mask_4 : tensor<1024x!tt.ptr<f32>> loc(#loc28)
    %0 = tt.splat %out_ptr : !tt.ptr<f32> -> tensor<1024x!tt.ptr<f32>> loc(#loc12)
    %1 = tt.addptr %0, %offsets_3 : tensor<1024x!tt.ptr<f32>>, tensor<1024xi32> loc(#loc12)
    %2 = arith.mulf %x_6, %cst : tensor<1024xf32> loc(#loc1)
    %3 = arith.addf %2, %y_8 : tensor<1024xf32> loc(#loc13)
    tt.store %1, %3, %mask_4 : tensor<1024x!tt.ptr<f32>> loc(#loc14)
"#;
    const SCALE_ADD_PARAMS: &str = "%x_ptr: !tt.ptr<f32> loc(\"x_ptr\"(#loc)), %y_ptr: !tt.ptr<f32> loc(\"y_ptr\"(#loc)), %out_ptr: !tt.ptr<f32> loc(\"out_ptr\"(#loc)), %n: i32 loc(\"n\"(#loc))";

    #[test]
    fn only_the_pointer_stored_through_is_written() {
        let ir = module("scale_add_kernel", SCALE_ADD_PARAMS, SCALE_ADD_BODY);
        assert_eq!(
            written_params(&ir, "scale_add_kernel"),
            Some(vec![false, false, true, false])
        );
        assert_eq!(written_params(&ir, "other_kernel"), None);
        // No store at all: nothing written.
        let ir = module("scale_add_kernel", SCALE_ADD_PARAMS, "");
        assert_eq!(
            written_params(&ir, "scale_add_kernel"),
            Some(vec![false; 4])
        );
    }

    /// Pointers advanced in a loop's iteration arguments: the one an atomic
    /// adds through is written, the one only loaded from is not, even
    /// though both are yielded by the same `scf.yield`.
    #[test]
    fn pointers_carried_through_a_loop_keep_their_own_parameter() {
        let body = r#"    %c128_i32 = arith.constant 128 : i32 loc(#loc1)
    %c0_i32 = arith.constant 0 : i32 loc(#loc1)
    %cst = arith.constant dense<128> : tensor<128xi32> loc(#loc2)
    %cst_0 = arith.constant dense<true> : tensor<128xi1> loc(#loc2)
    %pa = tt.make_range {end = 128 : i32, start = 0 : i32} : tensor<128xi32> loc(#loc15)
    %pa_1 = tt.splat %a_ptr : !tt.ptr<f32> -> tensor<128x!tt.ptr<f32>> loc(#loc16)
    %pa_2 = tt.addptr %pa_1, %pa : tensor<128x!tt.ptr<f32>>, tensor<128xi32> loc(#loc16)
    %pb = tt.splat %b_ptr : !tt.ptr<f32> -> tensor<128x!tt.ptr<f32>> loc(#loc17)
    %pb_3 = tt.addptr %pb, %pa : tensor<128x!tt.ptr<f32>>, tensor<128xi32> loc(#loc17)
    %pb_4:2 = scf.for %i = %c0_i32 to %n step %c128_i32 iter_args(%pa_5 = %pb_3, %pb_6 = %pa_2) -> (tensor<128x!tt.ptr<f32>>, tensor<128x!tt.ptr<f32>>)  : i32 {
      %v = tt.load %pa_5 : tensor<128x!tt.ptr<f32>> loc(#loc19)
      %0 = tt.atomic_rmw fadd, acq_rel, gpu, %pb_6, %v, %cst_0 : (tensor<128x!tt.ptr<f32>>, tensor<128xf32>, tensor<128xi1>) -> tensor<128xf32> loc(#loc7)
      %pa_7 = tt.addptr %pa_5, %cst : tensor<128x!tt.ptr<f32>>, tensor<128xi32> loc(#loc20)
      %pb_8 = tt.addptr %pb_6, %cst : tensor<128x!tt.ptr<f32>>, tensor<128xi32> loc(#loc21)
      scf.yield %pa_7, %pb_8 : tensor<128x!tt.ptr<f32>>, tensor<128x!tt.ptr<f32>> loc(#loc10)
    } loc(#loc22)
"#;
        let params = "%a_ptr: !tt.ptr<f32> loc(\"a_ptr\"(#loc)), %b_ptr: !tt.ptr<f32> loc(\"b_ptr\"(#loc)), %n: i32 loc(\"n\"(#loc))";
        let ir = module("accumulate", params, body);
        assert_eq!(
            written_params(&ir, "accumulate"),
            Some(vec![true, false, false])
        );
        // The loop's results carry their own parameters out: a store after
        // the loop through the second result writes b, not a.
        let after = body.to_string()
            + "    tt.store %pb_4#0, %cst_1 : tensor<128x!tt.ptr<f32>> loc(#loc9)\n";
        let ir = module("accumulate", params, &after);
        assert_eq!(
            written_params(&ir, "accumulate"),
            Some(vec![true, true, false])
        );
    }

    /// A value fed back by the yield reaches the store only on the second
    /// pass: the fixed point finds it.
    #[test]
    fn a_pointer_that_reaches_a_store_on_a_later_iteration_is_written() {
        let body = r#"    %c0_i32 = arith.constant 0 : i32 loc(#loc1)
    %p = tt.splat %a_ptr : !tt.ptr<f32> -> tensor<4x!tt.ptr<f32>> loc(#loc2)
    %q = tt.splat %b_ptr : !tt.ptr<f32> -> tensor<4x!tt.ptr<f32>> loc(#loc2)
    %r:2 = scf.for %i = %c0_i32 to %n step %n iter_args(%u = %p, %w = %q) -> (tensor<4x!tt.ptr<f32>>, tensor<4x!tt.ptr<f32>>)  : i32 {
      %v = tt.load %u : tensor<4x!tt.ptr<f32>> loc(#loc3)
      tt.store %w, %v : tensor<4x!tt.ptr<f32>> loc(#loc4)
      scf.yield %w, %u : tensor<4x!tt.ptr<f32>>, tensor<4x!tt.ptr<f32>> loc(#loc5)
    } loc(#loc6)
"#;
        let params =
            "%a_ptr: !tt.ptr<f32> loc(#loc), %b_ptr: !tt.ptr<f32> loc(#loc), %n: i32 loc(#loc)";
        let ir = module("swap", params, body);
        // The pointers swap each iteration: both are stored through.
        assert_eq!(written_params(&ir, "swap"), Some(vec![true, true, false]));
    }

    #[test]
    fn an_if_s_results_carry_what_either_branch_yields() {
        let body = r#"    %c0_i32 = arith.constant 0 : i32 loc(#loc1)
    %cond = arith.cmpi sgt, %n, %c0_i32 : i32 loc(#loc1)
    %p = scf.if %cond -> (!tt.ptr<f32>) {
      scf.yield %a_ptr : !tt.ptr<f32> loc(#loc2)
    } else {
      scf.yield %b_ptr : !tt.ptr<f32> loc(#loc3)
    } loc(#loc4)
    %v = tt.load %c_ptr : !tt.ptr<f32> loc(#loc5)
    tt.store %p, %v : !tt.ptr<f32> loc(#loc6)
"#;
        let params = "%a_ptr: !tt.ptr<f32> loc(#loc), %b_ptr: !tt.ptr<f32> loc(#loc), %c_ptr: !tt.ptr<f32> loc(#loc), %n: i32 loc(#loc)";
        let ir = module("choose", params, body);
        assert_eq!(
            written_params(&ir, "choose"),
            Some(vec![true, true, false, false])
        );
    }

    /// Sibling regions reuse names: `%5` of `then` and `%5` of `else` are
    /// two values, and only the first is stored through.
    #[test]
    fn names_reused_in_sibling_regions_are_different_values() {
        let body = r#"    %c0_i32 = arith.constant 0 : i32 loc(#loc1)
    %cond = arith.cmpi sgt, %n, %c0_i32 : i32 loc(#loc1)
    %7 = tt.splat %b_ptr : !tt.ptr<f32> -> tensor<4x!tt.ptr<f32>> loc(#loc8)
    scf.if %cond {
      %5 = tt.splat %a_ptr : !tt.ptr<f32> -> tensor<4x!tt.ptr<f32>> loc(#loc2)
      %6 = tt.load %7 : tensor<4x!tt.ptr<f32>> loc(#loc3)
      tt.store %5, %6 : tensor<4x!tt.ptr<f32>> loc(#loc4)
    } else {
      %5 = tt.splat %b_ptr : !tt.ptr<f32> -> tensor<4x!tt.ptr<f32>> loc(#loc5)
      %6 = tt.load %5 : tensor<4x!tt.ptr<f32>> loc(#loc6)
    } loc(#loc7)
"#;
        let params =
            "%a_ptr: !tt.ptr<f32> loc(#loc), %b_ptr: !tt.ptr<f32> loc(#loc), %n: i32 loc(#loc)";
        let ir = module("sides", params, body);
        assert_eq!(written_params(&ir, "sides"), Some(vec![true, false, false]));
    }

    /// `scf.while`: the arguments of `before` take the initial values and
    /// what `do` yields; `scf.condition` passes values on to `do`'s block
    /// arguments and to the loop's results.
    #[test]
    fn a_while_loop_carries_its_values_through_both_regions() {
        // A pointer walked by the loop: before's %p is a, do's %q is what
        // the condition passes on; the store after the loop goes through
        // its result.
        let body = r#"    %c1_i32 = arith.constant 1 : i32 loc(#loc1)
    %r = scf.while (%p = %a_ptr) : (!tt.ptr<f32>) -> !tt.ptr<f32> {
      %v = tt.load %p : !tt.ptr<f32> loc(#loc2)
      %c = arith.cmpf ogt, %v, %v : f32 loc(#loc3)
      scf.condition(%c) %p : !tt.ptr<f32> loc(#loc4)
    } do {
    ^bb0(%q: !tt.ptr<f32> loc("q")):
      %w = tt.load %b_ptr : !tt.ptr<f32> loc(#loc5)
      %n = tt.addptr %q, %c1_i32 : !tt.ptr<f32>, i32 loc(#loc6)
      scf.yield %n : !tt.ptr<f32> loc(#loc7)
    } loc(#loc8)
"#;
        let params = "%a_ptr: !tt.ptr<f32> loc(#loc), %b_ptr: !tt.ptr<f32> loc(#loc), %c_ptr: !tt.ptr<f32> loc(#loc)";
        let ir = module("walk", params, body);
        assert_eq!(written_params(&ir, "walk"), Some(vec![false; 3]));
        let stored = body.to_string()
            + "    %x = tt.load %c_ptr : !tt.ptr<f32> loc(#loc9)\n    tt.store %r, %x : !tt.ptr<f32> loc(#loc10)\n";
        let ir = module("walk", params, &stored);
        assert_eq!(written_params(&ir, "walk"), Some(vec![true, false, false]));
        // A store in `do` through its block argument writes a.
        let in_do = body.replace(
            "      scf.yield %n",
            "      tt.store %q, %w : !tt.ptr<f32> loc(#loc11)\n      scf.yield %n",
        );
        let ir = module("walk", params, &in_do);
        assert_eq!(written_params(&ir, "walk"), Some(vec![true, false, false]));
    }

    /// A reduction's combine region works on data; its block arguments
    /// and its return are not values of the function's pointers.
    #[test]
    fn a_reduction_region_is_data() {
        let body = r#"    %x = tt.splat %x_ptr : !tt.ptr<f32> -> tensor<64x!tt.ptr<f32>> loc(#loc1)
    %v = tt.load %x : tensor<64x!tt.ptr<f32>> loc(#loc2)
    %s = "tt.reduce"(%v) <{axis = 0 : i32}> ({
    ^bb0(%a: f32 loc("a"(#loc3)), %b: f32 loc("b"(#loc3))):
      %t = arith.addf %a, %b : f32 loc(#loc4)
      tt.reduce.return %t : f32 loc(#loc5)
    }) : (tensor<64xf32>) -> f32 loc(#loc6)
    tt.store %out_ptr, %s : !tt.ptr<f32> loc(#loc7)
"#;
        let params = "%x_ptr: !tt.ptr<f32> loc(#loc), %out_ptr: !tt.ptr<f32> loc(#loc)";
        let ir = module("sum", params, body);
        assert_eq!(written_params(&ir, "sum"), Some(vec![false, true]));
    }

    /// What the analysis does not model leaves every pointer written.
    #[test]
    fn what_is_not_modelled_counts_every_pointer_as_written() {
        let params = "%x_ptr: !tt.ptr<f32> loc(#loc), %out_ptr: !tt.ptr<f32> loc(#loc)";
        for line in [
            "    tt.call @helper(%x_ptr, %out_ptr) : (!tt.ptr<f32>, !tt.ptr<f32>) -> () loc(#loc1)\n",
            "    %p = tt.int_to_ptr %c : i64 -> !tt.ptr<f32> loc(#loc1)\n",
            "    %p = tt.load %t : !tt.ptr<!tt.ptr<f32>> loc(#loc1)\n",
            "    %w = scf.while (%a = %c) : (i32) -> i32 {\n    } loc(#loc1)\n",
            "    %w = scf.execute_region -> i32 {\n    } loc(#loc1)\n",
            "    cf.br ^bb1 loc(#loc1)\n",
            "    %p = tt.bitcast %i : i64 -> !tt.ptr<f32> loc(#loc1)\n",
        ] {
            let ir = module("k", params, line);
            assert_eq!(written_params(&ir, "k"), None, "{line}");
        }
        // A pointer stored as a value escapes: written.
        let body = "    %i = tt.ptr_to_int %x_ptr : !tt.ptr<f32> -> i64 loc(#loc1)\n    tt.store %out_ptr, %i : !tt.ptr<i64> loc(#loc2)\n";
        let ir = module("k", params, body);
        assert_eq!(written_params(&ir, "k"), Some(vec![true, true]));
        // A pointer cast to another element type is still its parameter.
        let body = "    %p = tt.bitcast %x_ptr : !tt.ptr<f32> -> !tt.ptr<i32> loc(#loc1)\n    %v = tt.load %out_ptr : !tt.ptr<i32> loc(#loc2)\n    tt.store %p, %v : !tt.ptr<i32> loc(#loc3)\n";
        let ir = module("k", params, body);
        assert_eq!(written_params(&ir, "k"), Some(vec![true, false]));
    }

    /// `depth` `scf.for` loops nested in one another, the innermost
    /// copying `x_ptr`'s value to `out_ptr`; the bounds are defined in
    /// the function's body, outside every loop.
    fn nested_loops(depth: usize) -> String {
        let mut body = String::from(
            "    %c0 = arith.constant 0 : i32 loc(#loc1)\n    %c1 = arith.constant 1 : i32 loc(#loc1)\n",
        );
        for d in 0..depth {
            body += &format!("    scf.for %i{d} = %c0 to %c1 step %c1 : i32 {{\n");
        }
        body += "    %v = tt.load %x_ptr : !tt.ptr<f32> loc(#loc2)\n    tt.store %out_ptr, %v : !tt.ptr<f32> loc(#loc3)\n";
        for _ in 0..depth {
            body += "    } loc(#loc4)\n";
        }
        let params = "%x_ptr: !tt.ptr<f32> loc(#loc), %out_ptr: !tt.ptr<f32> loc(#loc)";
        module("k", params, &body)
    }

    /// Regions nested deeper than the analysis follows: it gives up, every
    /// pointer counted as written, and says why.
    #[test]
    fn regions_nested_past_the_cap_give_up_saying_so() {
        assert_eq!(
            analyse(&nested_loops(MOST_NESTED_REGIONS), "k"),
            Ok(vec![false, true])
        );
        let e = analyse(&nested_loops(MOST_NESTED_REGIONS + 1), "k").unwrap_err();
        assert_eq!(e, "its regions nest deeper than 256");
        assert_eq!(written_params(&nested_loops(16_000), "k"), None);
    }

    /// The analysis takes steps in proportion to its input: twice the
    /// nesting, at most twice the steps (a name is found in one step,
    /// not by a walk up every open region).
    #[test]
    fn the_analysis_takes_steps_in_proportion_to_its_input() {
        let steps = |depth| {
            let (result, steps) = analyse_counting(&nested_loops(depth), "k");
            assert_eq!(result, Ok(vec![false, true]), "{depth}");
            steps
        };
        let (half, whole) = (steps(120), steps(240));
        assert!(
            whole <= 2 * half,
            "120 deep: {half} steps, 240 deep: {whole}"
        );
    }
}
