// S15: memory.load of %a uses %a_0, the state before the second store of %a
"tile.kernel"() <{sym_name = "s15_old_state"}> ({
^bb0(%X: view<[M, N], f32, const>, %Y: view<[M, N], f32>):
  "region.parallel"() <{label = "g", axes = [#axis<g = 2>], scope = "AUTOMATIC"}> ({
    %a, %a_init = "memory.alloc"() <{dtype = f32, layout = #layout<[4, 4] stride [4, 1] planned>, resource = #resource<auto>, owner = "g"}> : () -> (memory<[4, 4], f32>, state<[4, 4], f32>)
    %b, %b_init = "memory.alloc"() <{dtype = f32, layout = #layout<[4, 4] stride [4, 1] planned>, resource = #resource<auto>, owner = "g"}> : () -> (memory<[4, 4], f32>, state<[4, 4], f32>)
    %0 = "tile.load"(%X) <{offsets = [0, 0], shape = [4, 4], fill = 0.0}> : (view<[M, N], f32, const>) -> (tile<[4, 4], f32>)
    %a_0 = "memory.store"(%a, %a_init, %0) : (memory<[4, 4], f32>, state<[4, 4], f32>, tile<[4, 4], f32>) -> (state<[4, 4], f32>)
    %1 = "tile.load"(%X) <{offsets = [4, 0], shape = [4, 4], fill = 0.0}> : (view<[M, N], f32, const>) -> (tile<[4, 4], f32>)
    %b_0 = "memory.store"(%b, %b_init, %1) : (memory<[4, 4], f32>, state<[4, 4], f32>, tile<[4, 4], f32>) -> (state<[4, 4], f32>)
    %2 = "tile.load"(%X) <{offsets = [8, 0], shape = [4, 4], fill = 0.0}> : (view<[M, N], f32, const>) -> (tile<[4, 4], f32>)
    %a_1 = "memory.store"(%a, %a_0, %2) : (memory<[4, 4], f32>, state<[4, 4], f32>, tile<[4, 4], f32>) -> (state<[4, 4], f32>)
    %3 = "memory.load"(%a, %a_0) : (memory<[4, 4], f32>, state<[4, 4], f32>) -> (tile<[4, 4], f32>)  // verifier: S15 "uses an old state"
    "tile.store"(%Y, %3) <{offsets = [0, 0]}> : (view<[M, N], f32>, tile<[4, 4], f32>) -> ()
  }) : () -> ()
}) : () -> ()

