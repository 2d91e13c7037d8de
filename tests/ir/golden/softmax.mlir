// RUN: print examples/softmax.py | filecheck %s
// RUN: parse %s | print | filecheck %s
// One concern: the spelling of reductions, broadcasts and elementwise functions.

// CHECK-LABEL: "tile.kernel"() <{sym_name = "softmax"}> ({
// CHECK: %[[X:[^ ]+]] = "tile.load"(%{{[^)]+}}) <{offsets = [4 * %block_m, 0], shape = [4, N], fill = 0.0}>
// CHECK-NEXT: %[[MX:[^ ]+]] = "tile.reduce"(%[[X]]) <{fn = #reduce<max>, axis = 1}> : (tile<[4, N], f32>) -> (tile<[4], f32>)
// CHECK-NEXT: %[[B:[^ ]+]] = "tile.broadcast"(%[[MX]]) <{shape = [4, N], dims = [0]}> : (tile<[4], f32>) -> (tile<[4, N], f32>)
// CHECK-NEXT: %[[SH:[^ ]+]] = "tile.binary"(%[[X]], %[[B]]) <{fn = #binary<sub>}>
// CHECK-NEXT: %[[E:[^ ]+]] = "tile.unary"(%[[SH]]) <{fn = #unary<exp>}>
// CHECK-NEXT: %[[S:[^ ]+]] = "tile.reduce"(%[[E]]) <{fn = #reduce<sum>, axis = 1}>
// CHECK: "tile.binary"(%[[E]], %{{[^)]+}}) <{fn = #binary<div>}>

"tile.kernel"() <{sym_name = "softmax"}> ({
^bb0(%X: view<[M, N], f32, const>, %Y: view<[M, N], f32>):
  "region.parallel"() <{label = "block_m", axes = [#axis<block_m = ceildiv(M, 4)>], scope = "AUTOMATIC"}> ({
    %0 = "tile.load"(%X) <{offsets = [4 * %block_m, 0], shape = [4, N], fill = 0.0}> : (view<[M, N], f32, const>) -> (tile<[4, N], f32>)
    %1 = "tile.reduce"(%0) <{fn = #reduce<max>, axis = 1}> : (tile<[4, N], f32>) -> (tile<[4], f32>)
    %2 = "tile.broadcast"(%1) <{shape = [4, N], dims = [0]}> : (tile<[4], f32>) -> (tile<[4, N], f32>)
    %3 = "tile.binary"(%0, %2) <{fn = #binary<sub>}> : (tile<[4, N], f32>, tile<[4, N], f32>) -> (tile<[4, N], f32>)
    %4 = "tile.unary"(%3) <{fn = #unary<exp>}> : (tile<[4, N], f32>) -> (tile<[4, N], f32>)
    %5 = "tile.reduce"(%4) <{fn = #reduce<sum>, axis = 1}> : (tile<[4, N], f32>) -> (tile<[4], f32>)
    %6 = "tile.broadcast"(%5) <{shape = [4, N], dims = [0]}> : (tile<[4], f32>) -> (tile<[4, N], f32>)
    %7 = "tile.binary"(%4, %6) <{fn = #binary<div>}> : (tile<[4, N], f32>, tile<[4, N], f32>) -> (tile<[4, N], f32>)
    "tile.store"(%Y, %7) <{offsets = [4 * %block_m, 0]}> : (view<[M, N], f32>, tile<[4, N], f32>) -> ()
  }) : () -> ()
}) : () -> ()
