// Parse errors of the text IR, one per chunk (chunks are split at "// -----").
// Each `expected-error @+N {{text}}` names the line (relative to the marker) and a
// substring of the first line of the message; tests/ir/test_parser.py checks them.

"tile.kernel"() <{sym_name = "k"}> ({
^bb0(%X: view<[N], f32>):
  // expected-error @+1 {{unknown op 'tile.lod' (did you mean 'tile.load'?)}}
  %0 = "tile.lod"(%X) <{offsets = [0], shape = [4], fill = 0.0}> : (view<[N], f32>) -> (tile<[4], f32>)
}) : () -> ()

// -----

"tile.kernel"() <{sym_name = "k"}> ({
^bb0(%X: view<[N], f32>):
  // expected-error @+1 {{use of undefined value '%t'}}
  %0 = "tile.unary"(%t) <{fn = #unary<neg>}> : (tile<[4], f32>) -> (tile<[4], f32>)
}) : () -> ()

// -----

"tile.kernel"() <{sym_name = "k"}> ({
^bb0(%X: view<[N], f32>):
  %t = "tile.load"(%X) <{offsets = [0], shape = [4]}> : (view<[N], f32>) -> (tile<[4], f32>)
  // expected-error @+1 {{redefinition of value '%t'}}
  %t = "tile.unary"(%t) <{fn = #unary<neg>}> : (tile<[4], f32>) -> (tile<[4], f32>)
}) : () -> ()

// -----

// A name defined inside a region is not visible after the region.
"tile.kernel"() <{sym_name = "k"}> ({
^bb0(%X: view<[N], f32>):
  "region.parallel"() <{label = "p", axes = [#axis<i = 2>], scope = "AUTOMATIC"}> ({
    %t = "tile.load"(%X) <{offsets = [0], shape = [4]}> : (view<[N], f32>) -> (tile<[4], f32>)
  }) : () -> ()
  // expected-error @+1 {{use of undefined value '%t'}}
  "tile.store"(%X, %t) <{offsets = [0]}> : (view<[N], f32>, tile<[4], f32>) -> ()
}) : () -> ()

// -----

// A block argument may not shadow an outer value either.
"tile.kernel"() <{sym_name = "k"}> ({
^bb0(%X: view<[N], f32>):
  %t = "tile.load"(%X) <{offsets = [0], shape = [4]}> : (view<[N], f32>) -> (tile<[4], f32>)
  %r = "region.loop"(%t) <{kind = #loop<serial>, label = "l", axes = [#axis<k = 2>]}> ({
  // expected-error @+1 {{redefinition of value '%t'}}
  ^bb0(%t: tile<[4], f32>):
    "region.yield"(%t) : (tile<[4], f32>) -> ()
  }) : (tile<[4], f32>) -> (tile<[4], f32>)
}) : () -> ()

// -----

"tile.kernel"() <{sym_name = "k"}> ({
^bb0(%X: view<[N], f32>):
  // expected-error @+1 {{result #0 of 'tile.load' is declared tile<[4], f16> but the op produces tile<[4], f32>}}
  %t = "tile.load"(%X) <{offsets = [0], shape = [4]}> : (view<[N], f32>) -> (tile<[4], f16>)
}) : () -> ()

// -----

"tile.kernel"() <{sym_name = "k"}> ({
^bb0(%X: view<[N, N], f32>):
  %u = "tile.load"(%X) <{offsets = [0, 0], shape = [4, 8]}> : (view<[N, N], f32>) -> (tile<[4, 8], f32>)
  // expected-error @+1 {{result #0 of 'tile.reduce' is declared tile<[4, 8], f32> but the op produces tile<[4], f32>}}
  %t = "tile.reduce"(%u) <{fn = #reduce<sum>, axis = 1}> : (tile<[4, 8], f32>) -> (tile<[4, 8], f32>)
}) : () -> ()

// -----

"tile.kernel"() <{sym_name = "k"}> ({
^bb0(%X: view<[N], f32>):
  // expected-error @+1 {{operand #0 of 'tile.load' has type view<[N], f32> but the signature says view<[N], f16>}}
  %t = "tile.load"(%X) <{offsets = [0], shape = [4]}> : (view<[N], f16>) -> (tile<[4], f16>)
}) : () -> ()

// -----

"tile.kernel"() <{sym_name = "k"}> ({
^bb0(%X: view<[N], f32>):
  // expected-error @+1 {{'tile.load' produces 1 result(s) but the signature declares 0}}
  "tile.load"(%X) <{offsets = [0], shape = [4]}> : (view<[N], f32>) -> ()
}) : () -> ()

// -----

"tile.kernel"() <{sym_name = "k"}> ({
^bb0(%X: view<[N], f32>):
  // expected-error @+1 {{'tile.load' declares 1 result type(s) but binds 2 name(s)}}
  %a, %b = "tile.load"(%X) <{offsets = [0], shape = [4]}> : (view<[N], f32>) -> (tile<[4], f32>)
}) : () -> ()

// -----

"tile.kernel"() <{sym_name = "k"}> ({
^bb0(%X: view<[N], f32>):
  // expected-error @+1 {{'tile.unary' cannot infer its result types from operand types (view<[N], f32>)}}
  %t = "tile.unary"(%X) <{fn = #unary<neg>}> : (view<[N], f32>) -> (tile<[4], f32>)
}) : () -> ()

// -----

"tile.kernel"() <{sym_name = "k"}> ({
^bb0(%X: view<[N], f32>):
  %t = "tile.load"(%X) <{offsets = [0], shape = [4]}> : (view<[N], f32>) -> (tile<[4], f32>)
  // expected-error @+1 {{'tile.mma' expects 3 operands, got 2}}
  %u = "tile.mma"(%t, %t) : (tile<[4], f32>, tile<[4], f32>) -> (tile<[4], f32>)
}) : () -> ()

// -----

"tile.kernel"() <{sym_name = "k"}> ({
^bb0(%X: view<[N], f32>):
  // expected-error @+1 {{'tile.load' has 1 operand(s) but its signature lists 0 type(s)}}
  %t = "tile.load"(%X) <{offsets = [0], shape = [4]}> : () -> (tile<[4], f32>)
}) : () -> ()

// -----

"tile.kernel"() <{sym_name = "k"}> ({
^bb0(%X: view<[N], f32>):
  // expected-error @+1 {{'tile.load' is missing property 'offsets'}}
  %t = "tile.load"(%X) <{shape = [4]}> : (view<[N], f32>) -> (tile<[4], f32>)
}) : () -> ()

// -----

"tile.kernel"() <{sym_name = "k"}> ({
^bb0(%X: view<[N], f32>):
  // expected-error @+1 {{unknown property 'offset' of 'tile.load' (expected: offsets, shape, fill)}}
  %t = "tile.load"(%X) <{offset = [0], shape = [4]}> : (view<[N], f32>) -> (tile<[4], f32>)
}) : () -> ()

// -----

"tile.kernel"() <{sym_name = "k"}> ({
^bb0(%X: view<[N], f32>):
  // expected-error @+1 {{duplicate property 'shape'}}
  %t = "tile.load"(%X) <{offsets = [0], shape = [4], shape = [4]}> : (view<[N], f32>) -> (tile<[4], f32>)
}) : () -> ()

// -----

"tile.kernel"() <{sym_name = "k"}> ({
^bb0(%X: view<[N], f32>):
  // expected-error @+1 {{invalid expression '4 * * %i': unexpected '*' in expression}}
  %t = "tile.load"(%X) <{offsets = [4 * * %i], shape = [4]}> : (view<[N], f32>) -> (tile<[4], f32>)
}) : () -> ()

// -----

"tile.kernel"() <{sym_name = "k"}> ({
^bb0(%X: view<[N], f32>):
  // expected-error @+1 {{invalid expression 'floordiv(4, 0)': floordiv by zero}}
  %u = "tile.full"() <{shape = [2], dtype = f32, value = floordiv(4, 0)}> : () -> (tile<[2], f32>)
}) : () -> ()

// -----

"tile.kernel"() <{sym_name = "k"}> ({
^bb0(%X: view<[N], f32>):
  // expected-error @+1 {{expected an expression, found ']'}}
  %t = "tile.load"(%X) <{offsets = [0], shape = [4, ]}> : (view<[N], f32>) -> (tile<[4], f32>)
}) : () -> ()

// -----

"tile.kernel"() <{sym_name = "k"}> ({
^bb0(%X: view<[N], f32>):
  // expected-error @+1 {{unknown unary value 'cube' (expected one of: neg, exp, log, sqrt, rsqrt, tanh, abs)}}
  %t = "tile.unary"(%X) <{fn = #unary<cube>}> : (view<[N], f32>) -> (tile<[4], f32>)
}) : () -> ()

// -----

"tile.kernel"() <{sym_name = "k"}> ({
^bb0(%X: view<[N], f32>):
  // expected-error @+1 {{expected '#binary<...>', found '#unary'}}
  %t = "tile.binary"(%X, %X) <{fn = #unary<neg>}> : (view<[N], f32>, view<[N], f32>) -> (tile<[4], f32>)
}) : () -> ()

// -----

"tile.kernel"() <{sym_name = "k"}> ({
  // expected-error @+1 {{unknown element type 'f64' (known: f32, f16, bf16, i32, i1)}}
  %t = "tile.full"() <{shape = [2], dtype = f64, value = 0.0}> : () -> (tile<[2], f32>)
}) : () -> ()

// -----

"tile.kernel"() <{sym_name = "k"}> ({
  // expected-error @+1 {{swizzle shift 1 must be >= bits 2}}
  %m, %s = "memory.alloc"() <{dtype = f32, layout = #layout<[8] stride [1] xor(2, 0, 1)>, resource = #resource<auto>, owner = "kernel"}> : () -> (memory<[8], f32>, state<[8], f32>)
}) : () -> ()

// -----

"tile.kernel"() <{sym_name = "k"}> ({
  // expected-error @+1 {{layout rank mismatch: shape has 2 extents, stride has 1}}
  %m, %s = "memory.alloc"() <{dtype = f32, layout = #layout<[8, 8] stride [1]>, resource = #resource<auto>, owner = "kernel"}> : () -> (memory<[8, 8], f32>, state<[8, 8], f32>)
}) : () -> ()

// -----

"tile.kernel"() <{sym_name = "k"}> ({
  // expected-error @+1 {{expected 'stride', found '['}}
  %m, %s = "memory.alloc"() <{dtype = f32, layout = #layout<[8] [1]>, resource = #resource<auto>, owner = "kernel"}> : () -> (memory<[8], f32>, state<[8], f32>)
}) : () -> ()

// -----

"tile.kernel"() <{sym_name = "k"}> ({
  // expected-error @+1 {{unterminated string}}
  %t = "tile.full"() <{shape = [2], dtype = f32, value = 0.0}> {stage = "load} : () -> (tile<[2], f32>)
}) : () -> ()

// -----

"tile.kernel"() <{sym_name = "k"}> ({
  // expected-error @+1 {{invalid escape in string}}
  %t = "tile.full"() <{shape = [2], dtype = f32, value = 0.0}> {stage = "lo\qad"} : () -> (tile<[2], f32>)
}) : () -> ()

// -----

"tile.kernel"() <{sym_name = "k"}> ({
  // expected-error @+1 {{unexpected attribute 'color' (ops carry only 'stage')}}
  %t = "tile.full"() <{shape = [2], dtype = f32, value = 0.0}> {color = "red"} : () -> (tile<[2], f32>)
}) : () -> ()

// -----

"tile.kernel"() <{sym_name = "k"}> ({
  // expected-error @+1 {{expected a type (tile, view, memory, state or token), found 'tensor'}}
  %t = "tile.full"() <{shape = [2], dtype = f32, value = 0.0}> : () -> (tensor<[2], f32>)
}) : () -> ()

// -----

"tile.kernel"() <{sym_name = "k"}> ({
  // expected-error @+1 {{expected ':' and the op's signature, found 'loc'}}
  %t = "tile.full"() <{shape = [2], dtype = f32, value = 0.0}> loc(unknown)
}) : () -> ()

// -----

// expected-error @+2 {{kernel parameter '%T' must be a view, got tile<[4], f32>}}
"tile.kernel"() <{sym_name = "k"}> ({
^bb0(%T: tile<[4], f32>):
}) : () -> ()

// -----

"tile.kernel"() <{sym_name = "k"}> ({
  // expected-error @+1 {{'region.parallel' expects a region: expected '(', found ':'}}
  "region.parallel"() <{label = "p", axes = [#axis<i = 2>], scope = "AUTOMATIC"}> : () -> ()
}) : () -> ()

// -----

"tile.kernel"() <{sym_name = "k"}> ({
  "region.parallel"() <{label = "p", axes = [#axis<i = 2>], scope = "AUTOMATIC"}> ({
    "region.yield"() : () -> ()
  // expected-error @+1 {{a region holds a single block: unexpected block label}}
  ^bb1:
    "region.yield"() : () -> ()
  }) : () -> ()
}) : () -> ()

// -----

"tile.kernel"() <{sym_name = "k"}> ({
  // expected-error @+1 {{'tile.full' expects 0 region(s), got 1}}
  %t = "tile.full"() <{shape = [2], dtype = f32, value = 0.0}> ({
  }) : () -> (tile<[2], f32>)
}) : () -> ()

// -----

"tile.kernel"() <{sym_name = "k"}> ({
}) : () -> ()
// expected-error @+1 {{expected end of input after the kernel, found '"tile.kernel"'}}
"tile.kernel"() <{sym_name = "k2"}> ({
}) : () -> ()

// -----

// expected-error @+1 {{expected "tile.kernel", found '"tile.load"'}}
"tile.load"() : () -> ()

// -----

"tile.kernel"() <{sym_name = "k"}> ({
  // expected-error @+1 {{expected an integer, found '1.5'}}
  %r = "region.loop"() <{kind = #loop<serial>, label = "l", axes = [#axis<k = 2>], window = 1.5}> ({
  }) : () -> ()
}) : () -> ()

// -----

"tile.kernel"() <{sym_name = "k"}> ({
  // expected-error @+1 {{expected ',' or '}>', found 'label'}}
  "region.loop"() <{kind = #loop<serial> label = "l", axes = [#axis<k = 2>], window = 1}> ({
  }) : () -> ()
}) : () -> ()

// -----

"tile.kernel"() <{sym_name = "k"}> ({
^bb0(%X: view<[N], f32>):
  // expected-error @+1 {{expected a float (inf and nan are written as IEEE-754 bits, e.g. 0xFFF0000000000000 : f64 for -inf), found '-inf'}}
  %t = "tile.load"(%X) <{offsets = [0], shape = [4], fill = -inf}> : (view<[N], f32>) -> (tile<[4], f32>)
}) : () -> ()
