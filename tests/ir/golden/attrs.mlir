// RUN: parse %s | print | filecheck %s
// One concern: property values are read in any accepted spelling and printed in one
// canonical spelling that parses back to the same value.

// Strings: hex escapes and UTF-8 come back as \" \\ and \XX bytes.
// CHECK-LABEL: "tile.kernel"() <{sym_name = "attr\"s\\q \E2\9C\93"}> ({
"tile.kernel"() <{sym_name = "attr\22s\5Cq \E2\9C\93"}> ({
^bb0(%X: view<[M, 4 * N + 1], f16, const>):

  // Floats keep a '.', so 1e-05 gains one; -0.0 keeps its sign; inf and nan print
  // as IEEE-754 bits; an integer literal in a float property becomes a float.
  // CHECK: value = 1.0e-05}>
  // CHECK: value = -0.0}>
  // CHECK: value = 0x7FF8000000000000 : f64}>
  // CHECK: value = 0xFFF0000000000000 : f64}>
  // CHECK: value = 2.5}>
  // CHECK: fill = 7.0}>
  %a = "tile.full"() <{shape = [2], dtype = f32, value = 1e-05}> : () -> (tile<[2], f32>)
  %b = "tile.full"() <{shape = [2], dtype = f32, value = -0.0}> : () -> (tile<[2], f32>)
  %c = "tile.full"() <{shape = [2], dtype = f32, value = 0x7FF8000000000000 : f64}> : () -> (tile<[2], f32>)
  %d = "tile.full"() <{shape = [2], dtype = f32, value = 0xfff0000000000000 : f64}> : () -> (tile<[2], f32>)
  %e = "tile.full"() <{shape = [2], dtype = f32, value = 2.5 : f64}> : () -> (tile<[2], f32>)
  %f = "tile.load"(%X) <{offsets = [0, 0], shape = [2, 2], fill = 7}> : (view<[M, 4 * N + 1], f16, const>) -> (tile<[2, 2], f16>)

  // A float | Expr property without '.' is an expression; expressions print in
  // their canonical form (constant factor first, parentheses only where needed).
  // CHECK: <{shape = [2], dtype = i32, value = 3}>
  // CHECK: <{shape = [2], dtype = i32, value = floordiv(M, 2) + 1}>
  // CHECK: <{offsets = [4 * %i, M], shape = [2, 2], fill = 0.0}>
  %g = "tile.full"() <{shape = [2], dtype = i32, value = 3}> : () -> (tile<[2], i32>)
  %h = "tile.full"() <{shape = [2], dtype = i32, value = floordiv(M,2)+1}> : () -> (tile<[2], i32>)
  %k = "tile.load"(%X) <{offsets = [%i*4, (M)], shape = [2, 2]}> : (view<[M, 4 * N + 1], f16, const>) -> (tile<[2, 2], f16>)

  // Layouts keep swizzles in order and the planned flag; enums use #tag<value>.
  // CHECK: layout = #layout<[8, 8] stride [1, 8] xor(2, 0, 3) xor(1, 1, 2) planned>, resource = #resource<shared>
  // CHECK: layout = #layout<[4, N] stride [N + 1, 1]>, resource = #resource<private>, owner = "kernel"
  %m, %s = "memory.alloc"() <{owner = "kernel", resource = #resource<shared>, layout = #layout<[8, 8] stride [1, 8] xor(2, 0, 3) xor(1, 1, 2) planned>, dtype = bf16}> : () -> (memory<[8, 8], bf16>, state<[8, 8], bf16>)
  %n, %t = "memory.alloc"() <{dtype = f32, layout = #layout<[4, N] stride [N + 1, 1]>, resource = #resource<private>, owner = "kernel"}> : () -> (memory<[4, N], f32>, state<[4, N], f32>)

  // CHECK: "region.loop"() <{kind = #loop<reduce>, label = "r", axes = [#axis<r = ceildiv(M, 8)>, #axis<q = 2>], window = 1, interval = 3, stages = ["a \"b\"", "c"]}> ({
  "region.loop"() <{kind = #loop<reduce>, label = "r", axes = [#axis<r = ceildiv(M, 8)>, #axis<q = 2>], interval = 3, stages = ["a \"b\"", "c"]}> ({
    "region.yield"() : () -> ()
  }) : () -> ()
}) : () -> ()
