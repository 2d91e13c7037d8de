// RUN: print examples/attention.py | filecheck %s
// RUN: parse %s | print | filecheck %s
// One concern: masking. -inf prints as its IEEE-754 bits (as MLIR does), iota and a
// comparison make an i1 mask, and select picks between the scores and -inf.

// CHECK-LABEL: "tile.kernel"() <{sym_name = "attention"}> ({
// CHECK: %[[M:[^ ]+]] = "tile.full"() <{shape = [16], dtype = f32, value = 0xFFF0000000000000 : f64}>
// CHECK: "region.loop"(%[[M]], %{{[^,]+}}, %{{[^)]+}})
// CHECK: %[[KT:[^ ]+]] = "tile.transpose"(%{{[^)]+}}) <{perm = [1, 0]}> {stage = "compute"} : (tile<[16, D], f32>) -> (tile<[D, 16], f32>)
// CHECK: %[[I:[^ ]+]] = "tile.iota"() <{shape = [16, 16], dim = 1}> {stage = "compute"} : () -> (tile<[16, 16], i32>)
// CHECK-NEXT: %[[LIM:[^ ]+]] = "tile.full"() <{shape = [16, 16], dtype = i32, value = S - 16 * %kv_tiles}>
// CHECK-NEXT: %[[MASK:[^ ]+]] = "tile.binary"(%[[I]], %[[LIM]]) <{fn = #binary<lt>}> {stage = "compute"} : (tile<[16, 16], i32>, tile<[16, 16], i32>) -> (tile<[16, 16], i1>)
// CHECK-NEXT: %[[NINF:[^ ]+]] = "tile.full"() <{shape = [16, 16], dtype = f32, value = 0xFFF0000000000000 : f64}>
// CHECK-NEXT: "tile.select"(%[[MASK]], %{{[^,]+}}, %[[NINF]])

"tile.kernel"() <{sym_name = "attention"}> ({
^bb0(%Q: view<[L, D], f32, const>, %K: view<[S, D], f32, const>, %V: view<[S, D], f32, const>, %O: view<[L, D], f32>):
  "region.parallel"() <{label = "block_q", axes = [#axis<block_q = ceildiv(L, 16)>], scope = "AUTOMATIC"}> ({
    %0 = "tile.full"() <{shape = [16, D], dtype = f32, value = D}> : () -> (tile<[16, D], f32>)
    %1 = "tile.unary"(%0) <{fn = #unary<rsqrt>}> : (tile<[16, D], f32>) -> (tile<[16, D], f32>)
    %2 = "tile.load"(%Q) <{offsets = [16 * %block_q, 0], shape = [16, D], fill = 0.0}> : (view<[L, D], f32, const>) -> (tile<[16, D], f32>)
    %3 = "tile.binary"(%2, %1) <{fn = #binary<mul>}> : (tile<[16, D], f32>, tile<[16, D], f32>) -> (tile<[16, D], f32>)
    %m_i = "tile.full"() <{shape = [16], dtype = f32, value = 0xFFF0000000000000 : f64}> : () -> (tile<[16], f32>)
    %l_i = "tile.full"() <{shape = [16], dtype = f32, value = 0.0}> : () -> (tile<[16], f32>)
    %acc = "tile.full"() <{shape = [16, D], dtype = f32, value = 0.0}> : () -> (tile<[16, D], f32>)
    %m_i_0, %l_i_0, %acc_0 = "region.loop"(%m_i, %l_i, %acc) <{kind = #loop<pipeline>, label = "kv_tiles", axes = [#axis<kv_tiles = ceildiv(S, 16)>], window = 2, interval = 1, stages = ["load", "compute"]}> ({
    ^bb0(%m_i_1: tile<[16], f32>, %l_i_1: tile<[16], f32>, %acc_1: tile<[16, D], f32>):
      %4 = "tile.load"(%K) <{offsets = [16 * %kv_tiles, 0], shape = [16, D], fill = 0.0}> {stage = "load"} : (view<[S, D], f32, const>) -> (tile<[16, D], f32>)
      %5 = "tile.load"(%V) <{offsets = [16 * %kv_tiles, 0], shape = [16, D], fill = 0.0}> {stage = "load"} : (view<[S, D], f32, const>) -> (tile<[16, D], f32>)
      %6 = "tile.transpose"(%4) <{perm = [1, 0]}> {stage = "compute"} : (tile<[16, D], f32>) -> (tile<[D, 16], f32>)
      %7 = "tile.full"() <{shape = [16, 16], dtype = f32, value = 0.0}> {stage = "compute"} : () -> (tile<[16, 16], f32>)
      %8 = "tile.mma"(%3, %6, %7) {stage = "compute"} : (tile<[16, D], f32>, tile<[D, 16], f32>, tile<[16, 16], f32>) -> (tile<[16, 16], f32>)
      %9 = "tile.iota"() <{shape = [16, 16], dim = 1}> {stage = "compute"} : () -> (tile<[16, 16], i32>)
      %10 = "tile.full"() <{shape = [16, 16], dtype = i32, value = S - 16 * %kv_tiles}> {stage = "compute"} : () -> (tile<[16, 16], i32>)
      %11 = "tile.binary"(%9, %10) <{fn = #binary<lt>}> {stage = "compute"} : (tile<[16, 16], i32>, tile<[16, 16], i32>) -> (tile<[16, 16], i1>)
      %12 = "tile.full"() <{shape = [16, 16], dtype = f32, value = 0xFFF0000000000000 : f64}> {stage = "compute"} : () -> (tile<[16, 16], f32>)
      %13 = "tile.select"(%11, %8, %12) {stage = "compute"} : (tile<[16, 16], i1>, tile<[16, 16], f32>, tile<[16, 16], f32>) -> (tile<[16, 16], f32>)
      %14 = "tile.reduce"(%13) <{fn = #reduce<max>, axis = 1}> {stage = "compute"} : (tile<[16, 16], f32>) -> (tile<[16], f32>)
      %15 = "tile.binary"(%m_i_1, %14) <{fn = #binary<max>}> {stage = "compute"} : (tile<[16], f32>, tile<[16], f32>) -> (tile<[16], f32>)
      %16 = "tile.broadcast"(%15) <{shape = [16, 16], dims = [0]}> {stage = "compute"} : (tile<[16], f32>) -> (tile<[16, 16], f32>)
      %17 = "tile.binary"(%13, %16) <{fn = #binary<sub>}> {stage = "compute"} : (tile<[16, 16], f32>, tile<[16, 16], f32>) -> (tile<[16, 16], f32>)
      %18 = "tile.unary"(%17) <{fn = #unary<exp>}> {stage = "compute"} : (tile<[16, 16], f32>) -> (tile<[16, 16], f32>)
      %19 = "tile.binary"(%m_i_1, %15) <{fn = #binary<sub>}> {stage = "compute"} : (tile<[16], f32>, tile<[16], f32>) -> (tile<[16], f32>)
      %20 = "tile.unary"(%19) <{fn = #unary<exp>}> {stage = "compute"} : (tile<[16], f32>) -> (tile<[16], f32>)
      %21 = "tile.binary"(%l_i_1, %20) <{fn = #binary<mul>}> {stage = "compute"} : (tile<[16], f32>, tile<[16], f32>) -> (tile<[16], f32>)
      %22 = "tile.reduce"(%18) <{fn = #reduce<sum>, axis = 1}> {stage = "compute"} : (tile<[16, 16], f32>) -> (tile<[16], f32>)
      %23 = "tile.binary"(%21, %22) <{fn = #binary<add>}> {stage = "compute"} : (tile<[16], f32>, tile<[16], f32>) -> (tile<[16], f32>)
      %24 = "tile.broadcast"(%20) <{shape = [16, D], dims = [0]}> {stage = "compute"} : (tile<[16], f32>) -> (tile<[16, D], f32>)
      %25 = "tile.binary"(%acc_1, %24) <{fn = #binary<mul>}> {stage = "compute"} : (tile<[16, D], f32>, tile<[16, D], f32>) -> (tile<[16, D], f32>)
      %26 = "tile.mma"(%18, %5, %25) {stage = "compute"} : (tile<[16, 16], f32>, tile<[16, D], f32>, tile<[16, D], f32>) -> (tile<[16, D], f32>)
      "region.yield"(%15, %23, %26) : (tile<[16], f32>, tile<[16], f32>, tile<[16, D], f32>) -> ()
    }) : (tile<[16], f32>, tile<[16], f32>, tile<[16, D], f32>) -> (tile<[16], f32>, tile<[16], f32>, tile<[16, D], f32>)
    %27 = "tile.broadcast"(%l_i_0) <{shape = [16, D], dims = [0]}> : (tile<[16], f32>) -> (tile<[16, D], f32>)
    %28 = "tile.binary"(%acc_0, %27) <{fn = #binary<div>}> : (tile<[16, D], f32>, tile<[16, D], f32>) -> (tile<[16, D], f32>)
    "tile.store"(%O, %28) <{offsets = [16 * %block_q, 0]}> : (view<[L, D], f32>, tile<[16, D], f32>) -> ()
  }) : () -> ()
}) : () -> ()
