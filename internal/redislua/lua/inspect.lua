-- inspect.lua (after fence.lua, fair_lib.lua, state.lua): KEYS as state.lua.
-- Changes nothing; returns state().
return (state())
